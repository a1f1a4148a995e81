//! Exhaustive exploration: breadth first over every sequence of actions within a run's depth,
//! each world in canonical form visited once (by a 128-bit fingerprint), every rule checked
//! after every step, a level's worlds expanded by several threads and kept as bytes. A broken
//! rule comes back with the shortest sequence that breaks it (found again keeping every path).

use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use rustc_hash::{FxHashSet as HashSet, FxHasher};

use crate::action::Action;
use crate::encoding::Encode;
use crate::world::{Config, Outline, World};

/// What an exploration found.
#[derive(Debug)]
pub struct Report {
    /// The run's title.
    pub title: &'static str,
    /// Distinct worlds reached before the last level (the last level's worlds are checked,
    /// not told apart).
    pub states: usize,
    /// Steps taken (transitions tried).
    pub transitions: usize,
    /// The deepest level finished.
    pub depth: usize,
    /// The first rule broken, with the actions that lead to it.
    pub counterexample: Option<Counterexample>,
}

/// A rule broken, and the shortest sequence of actions from the start that breaks it.
#[derive(Debug)]
pub struct Counterexample {
    /// The rule, in words.
    pub rule: String,
    /// The actions, in order.
    pub actions: Vec<Action>,
}

impl std::fmt::Display for Counterexample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.rule)?;
        for (step, action) in self.actions.iter().enumerate() {
            writeln!(f, "  {}. {action}", step + 1)?;
        }
        Ok(())
    }
}

/// A world's fingerprint: two 64-bit hashes of its bytes, by differently seeded hashers.
fn fingerprint(bytes: &[u8]) -> u128 {
    let mut first = FxHasher::default();
    0x9e37_79b9_7f4a_7c15_u64.hash(&mut first);
    bytes.hash(&mut first);
    let mut second = FxHasher::default();
    0xc2b2_ae3d_27d4_eb4f_u64.hash(&mut second);
    bytes.hash(&mut second);
    (u128::from(first.finish()) << 64) | u128::from(second.finish())
}

/// The world's representative among the worlds alike to it (threads of one client swapped),
/// in canonical form, as bytes, and its fingerprint. The threads are put in the least order of
/// their outlines (which no numbering of ids changes); threads whose outlines tie are tried in
/// each order, and the least fingerprint wins.
fn representative(world: &mut World, config: &Config, orders: &[Vec<usize>]) -> (Vec<u8>, u128) {
    let outlines: smallvec::SmallVec<[Outline; 4]> = world
        .threads
        .iter()
        .map(|thread| thread.outline(world.now))
        .collect();
    let least = orders
        .iter()
        .min_by(|a, b| keyed(&outlines, a).cmp(keyed(&outlines, b)));
    let mut candidates: smallvec::SmallVec<[&Vec<usize>; 4]> = smallvec::SmallVec::new();
    for order in orders.iter().filter(|order| {
        least.is_some_and(|least| keyed(&outlines, order).eq(keyed(&outlines, least)))
    }) {
        // Threads alike in every way make the same world in either order.
        let same = candidates.iter().any(|other| {
            order
                .iter()
                .zip(other.iter())
                .all(|(a, b)| world.threads[*a] == world.threads[*b])
        });
        if !same {
            candidates.push(order);
        }
    }
    let mut best: Option<(Vec<u8>, u128)> = None;
    let last = candidates.len().saturating_sub(1);
    let original = (last > 0).then(|| world.clone());
    for (at, order) in candidates.into_iter().enumerate() {
        if at > 0 {
            if let Some(original) = &original {
                world.clone_from(original);
            }
        }
        let in_order = order.iter().enumerate().all(|(to, from)| to == *from);
        if !in_order {
            world.permute(order);
        }
        world.canonicalize(config);
        let mut bytes = Vec::with_capacity(128);
        world.encode(&mut bytes);
        let print = fingerprint(&bytes);
        if best.as_ref().is_none_or(|(_, known)| print < *known) {
            best = Some((bytes, print));
        }
    }
    best.unwrap_or_default()
}

/// The outlines of the threads in `order`.
fn keyed<'a>(
    outlines: &'a [Outline],
    order: &'a [usize],
) -> impl Iterator<Item = &'a Outline> + Clone + 'a {
    order.iter().map(move |from| &outlines[*from])
}

/// One level's worlds, as bytes one after the other.
#[derive(Default)]
struct Level {
    bytes: Vec<u8>,
    /// Each world's end in `bytes`, and its path (when paths are kept).
    ends: Vec<(usize, u32)>,
}

impl Level {
    fn push(&mut self, bytes: &[u8], path: u32) {
        self.bytes.extend_from_slice(bytes);
        self.ends.push((self.bytes.len(), path));
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    /// The world at `index`, and its path.
    fn get(&self, index: usize) -> (World, u32) {
        let start = if index == 0 {
            0
        } else {
            self.ends[index - 1].0
        };
        let (end, path) = self.ends[index];
        let mut input = &self.bytes[start..end];
        (World::decode(&mut input), path)
    }
}

/// The worlds seen, by fingerprint, in shards that threads lock one at a time.
struct Seen {
    shards: Vec<Mutex<HashSet<u128>>>,
}

impl Seen {
    fn new() -> Self {
        Seen {
            shards: (0..64).map(|_| Mutex::new(HashSet::default())).collect(),
        }
    }

    /// Whether `print` is new (it is seen from now on).
    fn insert(&self, print: u128) -> bool {
        let shard = &self.shards[(print as usize) % self.shards.len()];
        shard
            .lock()
            .map(|mut set| set.insert(print))
            .unwrap_or(false)
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().map(|set| set.len()).unwrap_or(0))
            .sum()
    }
}

/// What one thread found expanding its part of a level.
#[derive(Default)]
struct Expanded {
    next: Level,
    transitions: usize,
    /// A rule broken: the path index of the world it broke from.
    broken: Option<u32>,
    /// Paths made (parent, fingerprint), when paths are kept.
    paths: Vec<(u32, u128)>,
}

/// Explores every sequence of `config.depth` actions at most from the start.
pub fn explore(config: &Config) -> Report {
    let (report, broken_at) = search(config, config.depth, false);
    match broken_at {
        // Found again keeping every path, to say how.
        Some(depth) => {
            let (mut again, _) = search(config, depth + 1, true);
            again.states = report.states;
            again.transitions = report.transitions;
            again
        }
        None => report,
    }
}

/// Breadth first to `depth`, `threads` at a time; keeping every path (`track`) to report a
/// counterexample. Returns the report and the level at which a rule broke.
fn search(config: &Config, depth: usize, track: bool) -> (Report, Option<usize>) {
    let orders = crate::canonical::symmetries(config);
    let start = World::new(config);
    let (first, first_print) = representative(&mut start.clone(), config, &orders);
    let seen = Seen::new();
    seen.insert(first_print);
    let mut level = Level::default();
    level.push(&first, 0);
    let mut paths: Vec<(u32, u128)> = vec![(0, first_print)];
    let mut transitions = 0;
    let workers = if track {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
    };
    for at in 0..depth {
        let last = at + 1 == depth;
        let chunk = level.len().div_ceil(workers).max(1);
        let level_ref = &level;
        let seen_ref = &seen;
        let orders_ref = &orders;
        let parts: Vec<Expanded> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|worker| {
                    scope.spawn(move || {
                        let from = worker * chunk;
                        let to = ((worker + 1) * chunk).min(level_ref.len());
                        expand(
                            config,
                            orders_ref,
                            level_ref,
                            from..to,
                            seen_ref,
                            last,
                            track,
                        )
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().unwrap_or_default())
                .collect()
        });
        let mut next = Level::default();
        let mut broken = None;
        for part in parts {
            transitions += part.transitions;
            broken = broken.or(part.broken);
            let base = paths.len() as u32;
            let offset = next.bytes.len();
            next.bytes.extend_from_slice(&part.next.bytes);
            next.ends.extend(
                part.next
                    .ends
                    .iter()
                    .map(|(end, path)| (end + offset, if track { path + base } else { 0 })),
            );
            paths.extend(part.paths);
        }
        if let Some(path) = broken {
            let counterexample = track.then(|| {
                let mut chain = Vec::new();
                let mut at = path;
                while at != 0 {
                    chain.push(paths[at as usize].1);
                    at = paths[at as usize].0;
                }
                chain.reverse();
                replay(start.clone(), config, &orders, &chain)
            });
            let report = Report {
                title: config.title,
                states: seen.len(),
                transitions,
                depth: at,
                counterexample: counterexample.or_else(|| {
                    Some(Counterexample {
                        rule: String::new(),
                        actions: Vec::new(),
                    })
                }),
            };
            return (report, Some(at));
        }
        if std::env::var_os("DLOCK_MODEL_TRACE").is_some() {
            eprintln!(
                "{}: depth {} frontier {} ({} bytes) seen {}",
                config.title,
                at + 1,
                next.len(),
                next.bytes.len(),
                seen.len()
            );
        }
        level = next;
        if level.len() == 0 && !last {
            break;
        }
    }
    let report = Report {
        title: config.title,
        states: seen.len(),
        transitions,
        depth,
        counterexample: None,
    };
    (report, None)
}

/// Expands the worlds `range` of `level`: each action taken and checked, each new world kept
/// for the next level (unless it is the `last`).
fn expand(
    config: &Config,
    orders: &[Vec<usize>],
    level: &Level,
    range: std::ops::Range<usize>,
    seen: &Seen,
    last: bool,
    track: bool,
) -> Expanded {
    let mut out = Expanded::default();
    for index in range {
        let (world, path) = level.get(index);
        for action in world.actions(config) {
            out.transitions += 1;
            let mut after = world.clone();
            let checked = after
                .take(config, &action)
                .and_then(|()| after.check(config));
            if checked.is_err() {
                out.broken = Some(path);
                return out;
            }
            // The last level's worlds are checked and expanded no further: telling which of
            // them are new would only count them (four in five of a run's steps land here).
            if last {
                continue;
            }
            let (bytes, print) = representative(&mut after, config, orders);
            if !seen.insert(print) {
                continue;
            }
            if track {
                out.paths.push((path, print));
            }
            out.next
                .push(&bytes, out.paths.len() as u32 - u32::from(track));
        }
    }
    out
}

/// The actions, in the start's own numbering of threads and ids, that lead through the worlds
/// `chain` (by fingerprint) and then break a rule: found again step by step, since the worlds
/// explored were representatives (threads of one client swapped, ids numbered anew).
fn replay(start: World, config: &Config, orders: &[Vec<usize>], chain: &[u128]) -> Counterexample {
    let mut world = start;
    let mut actions = Vec::new();
    for print in chain {
        let step = world.actions(config).into_iter().find_map(|action| {
            let after = world.after(config, &action).ok()?;
            (representative(&mut after.clone(), config, orders).1 == *print)
                .then_some((action, after))
        });
        let Some((action, after)) = step else {
            break;
        };
        actions.push(action);
        world = after;
    }
    for action in world.actions(config) {
        let broken = match world.after(config, &action) {
            Ok(after) => after.check(config).err(),
            Err(violation) => Some(violation),
        };
        if let Some(violation) = broken {
            actions.push(action);
            return Counterexample {
                rule: violation.0,
                actions,
            };
        }
    }
    Counterexample {
        rule: "a rule broke, but the sequence could not be found again".into(),
        actions,
    }
}
