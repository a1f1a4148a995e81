//! `dlock top [PATTERN]`: a full-screen view of what is held on the backend now, refreshed
//! every second, read with the backend's inspection and never written. What the store holds is
//! shown escaped: the screen is the operator's terminal.
//!
//! Keys: `q` (or Esc, Ctrl-C) quits, `/` filters by a substring of the name, `s` changes the
//! sort (waiters then age, age, name, lease left).

use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use ratatui::Frame;

use dlocks::backend::Inspection;

use crate::connect::{Access, Target};
use crate::escape::{escaped, quoted};
use crate::exit_code::{Failure, UNAVAILABLE};
use crate::run::human;
use crate::snapshot::{self, Entry};

/// How often the view is read again.
const REFRESH: Duration = Duration::from_secs(1);

/// The most names of each sort read per refresh.
const LIMIT: usize = 1000;

/// How the rows are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    /// Most waiters first, then the longest held.
    Waiters,
    /// The longest held first.
    Age,
    Name,
    /// The least lease left first.
    LeaseLeft,
}

impl Sort {
    fn next(self) -> Sort {
        match self {
            Sort::Waiters => Sort::Age,
            Sort::Age => Sort::Name,
            Sort::Name => Sort::LeaseLeft,
            Sort::LeaseLeft => Sort::Waiters,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Sort::Waiters => "waiters, then age",
            Sort::Age => "age",
            Sort::Name => "name",
            Sort::LeaseLeft => "lease left",
        }
    }

    fn order(self, entries: &mut [Entry]) {
        let age = |entry: &Entry| std::cmp::Reverse(entry.held_for.unwrap_or_default());
        match self {
            Sort::Waiters => entries.sort_by(|a, b| {
                b.waiters
                    .cmp(&a.waiters)
                    .then_with(|| age(a).cmp(&age(b)))
                    .then_with(|| a.name.cmp(&b.name))
            }),
            Sort::Age => {
                entries.sort_by(|a, b| age(a).cmp(&age(b)).then_with(|| a.name.cmp(&b.name)))
            }
            Sort::Name => entries.sort_by(|a, b| a.name.cmp(&b.name)),
            Sort::LeaseLeft => entries.sort_by(|a, b| {
                let left = |entry: &Entry| entry.lease_left.unwrap_or(Duration::MAX);
                left(a).cmp(&left(b)).then_with(|| a.name.cmp(&b.name))
            }),
        }
    }
}

/// What the screen shows.
struct View {
    url: String,
    pattern: String,
    entries: Vec<Entry>,
    error: Option<String>,
    read_at: Option<Instant>,
    sort: Sort,
    /// The name filter applied, and the one being typed after `/`.
    filter: String,
    typing: Option<String>,
}

/// `dlock top [PATTERN]`: runs until `q`.
pub fn top(target: &Target, pattern: &str) -> Result<i32, Failure> {
    let backend = crate::connect::backend(target, Access::Read)?;
    let inspection = backend.inspection()?;
    let mut view = View {
        url: target.shown(),
        pattern: pattern.to_owned(),
        entries: Vec::new(),
        error: None,
        read_at: None,
        sort: Sort::Waiters,
        filter: String::new(),
        typing: None,
    };
    let mut terminal = ratatui::try_init().map_err(|error| {
        Failure::new(
            crate::exit_code::USAGE,
            format!("dlock top needs a terminal: {error}"),
        )
    })?;
    let outcome = run(&mut terminal, inspection, &mut view);
    ratatui::restore();
    outcome
}

fn run(
    terminal: &mut ratatui::DefaultTerminal,
    backend: &dyn Inspection,
    view: &mut View,
) -> Result<i32, Failure> {
    let terminal_failed =
        |error: std::io::Error| Failure::new(UNAVAILABLE, format!("the terminal failed: {error}"));
    let mut next_read = Instant::now();
    loop {
        if Instant::now() >= next_read {
            match snapshot::take(backend, &view.pattern, LIMIT) {
                Ok(entries) => {
                    view.entries = entries;
                    view.error = None;
                }
                // Shown, and tried again at the next refresh: a server that comes back is
                // seen again without restarting the view.
                Err(failure) => view.error = Some(failure.to_string()),
            }
            view.read_at = Some(Instant::now());
            next_read = Instant::now() + REFRESH;
        }
        terminal
            .draw(|frame| draw(frame, view))
            .map_err(terminal_failed)?;
        let wait = next_read.saturating_duration_since(Instant::now());
        if !event::poll(wait).map_err(terminal_failed)? {
            continue;
        }
        let Event::Key(key) = event::read().map_err(terminal_failed)? else {
            continue;
        };
        if key.kind != KeyEventKind::Press {
            continue;
        }
        if let Some(typed) = &mut view.typing {
            match key.code {
                KeyCode::Enter => {
                    view.filter = std::mem::take(typed);
                    view.typing = None;
                }
                KeyCode::Esc => view.typing = None,
                KeyCode::Backspace => {
                    typed.pop();
                }
                KeyCode::Char(c) => typed.push(c),
                _ => {}
            }
            continue;
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return Ok(0),
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return Ok(0),
            // A new filter each time; an empty one shows every name again.
            KeyCode::Char('/') => view.typing = Some(String::new()),
            KeyCode::Char('s') => view.sort = view.sort.next(),
            _ => {}
        }
    }
}

fn draw(frame: &mut Frame<'_>, view: &View) {
    let [title, table, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());

    let mut entries: Vec<Entry> = view
        .entries
        .iter()
        .filter(|entry| entry.name.contains(&view.filter))
        .cloned()
        .collect();
    view.sort.order(&mut entries);
    let status = match &view.error {
        Some(error) => format!("error: {error}"),
        None => format!("{} in use", entries.len()),
    };
    let filter = if view.filter.is_empty() {
        String::new()
    } else {
        format!(", filter {}", quoted(&view.filter))
    };
    frame.render_widget(
        Paragraph::new(Line::from(format!(
            "dlock top: {} {}: {}; sorted by {}{filter}",
            escaped(&view.url),
            quoted(&view.pattern),
            escaped(&status),
            view.sort.label()
        ))),
        title,
    );

    let header = Row::new([
        "NAME",
        "KIND",
        "HOLDER",
        "HELD FOR",
        "LEASE LEFT",
        "WAITERS",
        "",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD));
    let rows = entries.iter().map(|entry| {
        Row::new([
            Cell::from(escaped(&entry.name).into_owned()),
            Cell::from(entry.kind),
            Cell::from(escaped(&entry.holder).into_owned()),
            Cell::from(entry.held_for.map_or_else(|| "-".to_owned(), human)),
            Cell::from(entry.lease_left.map_or_else(|| "-".to_owned(), human)),
            Cell::from(entry.waiters.to_string()),
            Cell::from(escaped(&entry.detail).into_owned()),
        ])
    });
    // The last column (`token 1795755104361248`, `3/5 permits`) whole: a cut number reads as
    // another number.
    let detail = entries
        .iter()
        .map(|entry| escaped(&entry.detail).chars().count())
        .max()
        .unwrap_or(0)
        .max(1);
    let widths = [
        Constraint::Fill(3),
        Constraint::Length(9),
        Constraint::Fill(3),
        Constraint::Length(9),
        Constraint::Length(10),
        Constraint::Length(7),
        Constraint::Length(u16::try_from(detail).unwrap_or(u16::MAX)),
    ];
    frame.render_widget(Table::new(rows, widths).header(header), table);

    let help = match &view.typing {
        Some(typed) => format!("filter: {typed}_   (Enter applies, Esc cancels)"),
        None => "q quit   / filter   s sort".to_owned(),
    };
    frame.render_widget(Paragraph::new(Line::from(help)), footer);
}
