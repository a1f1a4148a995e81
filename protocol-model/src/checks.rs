//! The rules checked after every step: the lease rule (a hold a thread believes in is on the
//! store until at least its deadline, unless the store ended it, and then it is never believed
//! past the deadline it had), exclusion among the holds the store did not end, permits, and
//! set-once steps that set once.

use crate::kind::{Family, Kind};
use crate::transition::Violation;
use crate::world::{Config, World};

impl World {
    /// Checks every rule; the first one broken, in words.
    pub fn check(&self, config: &Config) -> Result<(), Violation> {
        let _ = config;
        self.check_leases()?;
        self.check_exclusion()?;
        self.check_set_once()?;
        if self.memory.unapplied {
            return Err(Violation(
                "a node's renewal answer waited for another node's before it was applied".into(),
            ));
        }
        Ok(())
    }

    fn check_leases(&self) -> Result<(), Violation> {
        for (t, thread) in self.threads.iter().enumerate() {
            for hold in thread.holds.iter().filter(|h| h.believed(self.now)) {
                if let Some((_, frozen)) = self.memory.ended.iter().find(|(id, _)| *id == hold.id) {
                    if hold.deadline > *frozen {
                        return Err(Violation(format!(
                            "thread {t} believes its {:?} hold on n{} until {}, though the store \
                             ended it when its deadline was {frozen}",
                            hold.kind, hold.name, hold.deadline
                        )));
                    }
                    continue;
                }
                let kept = self.store.names[usize::from(hold.name)].lease_of(hold.kind, hold.id);
                match kept {
                    Some(until) if until >= hold.deadline => {}
                    kept => {
                        return Err(Violation(format!(
                            "thread {t} believes its {:?} hold on n{} until {}, and the store \
                             keeps it {}",
                            hold.kind,
                            hold.name,
                            hold.deadline,
                            kept.map_or("not at all".to_owned(), |until| format!("until {until}"))
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    fn check_exclusion(&self) -> Result<(), Violation> {
        for name in 0..self.store.names.len() {
            // The holds believed that the store did not end (those it ended may overlap
            // others until their deadline: the price of a force unlock or a lost store).
            let believed: Vec<(usize, Kind)> = self
                .threads
                .iter()
                .enumerate()
                .flat_map(|(t, thread)| thread.holds.iter().map(move |h| (t, h)))
                .filter(|(_, h)| usize::from(h.name) == name && h.believed(self.now))
                .filter(|(_, h)| !self.memory.ended.iter().any(|(id, _)| *id == h.id))
                .map(|(t, h)| (t, h.kind))
                .collect();
            let families: Vec<Family> = believed.iter().map(|(_, k)| k.family()).collect();
            if families.windows(2).any(|pair| pair[0] != pair[1]) {
                return Err(Violation(format!(
                    "n{name} is believed held as two kinds at once: {believed:?}"
                )));
            }
            let exclusive: Vec<(usize, Kind)> = believed
                .iter()
                .copied()
                .filter(|(_, k)| !matches!(k, Kind::Read | Kind::Semaphore))
                .collect();
            if exclusive.len() > 1 {
                return Err(Violation(format!(
                    "n{name} has two believing holders: {exclusive:?}"
                )));
            }
            if let Some((writer, _)) = exclusive.first() {
                if let Some((reader, _)) = believed
                    .iter()
                    .find(|(t, k)| *k == Kind::Read && t != writer)
                {
                    return Err(Violation(format!(
                        "n{name} is written by thread {writer} and read by thread {reader}"
                    )));
                }
            }
            let permits = believed
                .iter()
                .filter(|(_, k)| *k == Kind::Semaphore)
                .count() as u64;
            let total = self
                .memory
                .permits
                .iter()
                .find(|(n, _)| usize::from(*n) == name)
                .map_or(0, |(_, p)| *p);
            if permits > total {
                return Err(Violation(format!(
                    "n{name}: {permits} permits believed held, of {total}"
                )));
            }
        }
        Ok(())
    }

    fn check_set_once(&self) -> Result<(), Violation> {
        let mut armed = self.memory.armed.clone();
        armed.sort();
        match armed.windows(2).find(|pair| pair[0] == pair[1]) {
            Some(pair) => Err(Violation(format!(
                "the set-once request {:?} set its count or permits twice",
                pair[0]
            ))),
            None => Ok(()),
        }
    }
}
