//! The suite's table (Markdown) and its JSON form.

use serde_json::{json, Value};

use crate::checker::Findings;
use crate::options::{FaultKind, Mode};

/// One row: a fault, a mode, and what the checker found.
pub struct Row {
    pub fault: FaultKind,
    pub mode: Mode,
    pub findings: Findings,
}

pub const HEADER: &str = "| fault | mode | ops done | lock errors | overlaps | token regressions | stale accepted | stale refused | lost updates | hangs | panics | recovery |\n\
|---|---|---|---|---|---|---|---|---|---|---|---|";

impl Row {
    /// The row as a Markdown table line.
    pub fn markdown(&self) -> String {
        let f = &self.findings;
        let recovery = match f.recovery {
            Some(recovery) => format!("{} ms", recovery.as_millis()),
            None => "never".to_owned(),
        };
        let fenced = |n: Option<usize>| n.map_or_else(|| "—".to_owned(), |n| n.to_string());
        let panics = if f.crashes > 0 {
            format!("{} (+{} crashed)", f.panics, f.crashes)
        } else {
            f.panics.to_string()
        };
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            self.fault.name(),
            self.mode.name(),
            f.done,
            f.errors,
            f.overlaps,
            fenced(f.token_regressions),
            fenced(f.stale_accepted),
            f.stale_refused,
            f.lost_updates,
            f.hangs,
            panics,
            recovery
        )
    }

    /// The row as JSON.
    pub fn json(&self) -> Value {
        let f = &self.findings;
        json!({
            "fault": self.fault.name(),
            "mode": self.mode.name(),
            "done": f.done,
            "errors": f.errors,
            "overlaps": f.overlaps,
            "token_regressions": f.token_regressions,
            "stale_accepted": f.stale_accepted,
            "stale_refused": f.stale_refused,
            "lost_updates": f.lost_updates,
            "hangs": f.hangs,
            "panics": f.panics,
            "crashes": f.crashes,
            "recovery_ms": f.recovery.map(|r| r.as_millis() as u64),
            "notes": f.notes,
        })
    }
}
