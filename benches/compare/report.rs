//! The printed table, its markdown copy and the hand-off chart.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Rows of one table, printed as markdown.
#[derive(Default)]
pub struct Report {
    text: String,
}

impl Report {
    pub fn heading(&mut self, title: &str, columns: &[&str]) {
        let _ = writeln!(self.text, "\n### {title}\n");
        let _ = writeln!(self.text, "| {} |", columns.join(" | "));
        let _ = writeln!(self.text, "|{}", "---|".repeat(columns.len()));
        print!(
            "\n### {title}\n\n| {} |\n|{}\n",
            columns.join(" | "),
            "---|".repeat(columns.len())
        );
    }

    pub fn row(&mut self, cells: &[String]) {
        let line = format!("| {} |", cells.join(" | "));
        println!("{line}");
        let _ = writeln!(self.text, "{line}");
    }

    pub fn note(&mut self, text: &str) {
        println!("{text}");
        let _ = writeln!(self.text, "{text}");
    }

    pub fn markdown(&self) -> &str {
        &self.text
    }
}

/// One bar group of the chart: a library and its hand-off p50 (µs) per worker count.
pub struct Bars {
    pub library: String,
    pub p50_us: Vec<(usize, f64)>,
}

/// Hand-off p50 per library and worker count, log scale, as SVG.
pub fn chart(path: &Path, groups: &[Bars], rtt_us: f64) -> Result<(), String> {
    let worker_counts: Vec<usize> = {
        let mut all: Vec<usize> = groups
            .iter()
            .flat_map(|g| g.p50_us.iter().map(|(w, _)| *w))
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    let height = 90 + 34 * groups.len() as u32 * worker_counts.len().max(1) as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let max = groups
        .iter()
        .flat_map(|g| g.p50_us.iter().map(|(_, v)| *v))
        .fold(rtt_us * 4.0, f64::max)
        * 6.0;
    let rows = groups.len() * worker_counts.len();
    let x_min = rtt_us / 4.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Forced hand-off latency, p50 (log scale; lower is better)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(230)
        .build_cartesian_2d((x_min..max).log_scale(), 0f64..rows as f64)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&|v| crate::stats::us(*v))
        .x_desc("release → next holder's acquire returns")
        .draw()
        .map_err(|e| e.to_string())?;
    let label_style = ("sans-serif", 13)
        .into_text_style(&root)
        .pos(Pos::new(HPos::Right, VPos::Center));
    let palette = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(214, 39, 40),
    ];
    let mut row = 0usize;
    for (gi, group) in groups.iter().enumerate() {
        for w in &worker_counts {
            let y = (rows - 1 - row) as f64; // first group on top
            row += 1;
            let (px, py) = chart.backend_coord(&(x_min, y + 0.5));
            root.draw(&Text::new(
                format!("{}, {w} workers", group.library),
                (px - 8, py),
                &label_style,
            ))
            .map_err(|e| e.to_string())?;
            let Some((_, value)) = group.p50_us.iter().find(|(count, _)| count == w) else {
                continue;
            };
            let color = if gi == 0 {
                palette[0]
            } else if *w <= 2 {
                palette[1]
            } else {
                palette[2]
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x_min, y + 0.15), (*value, y + 0.85)],
                    color.mix(0.85).filled(),
                )))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(std::iter::once(Text::new(
                    crate::stats::us(*value),
                    (*value * 1.1, y + 0.65),
                    ("sans-serif", 13),
                )))
                .map_err(|e| e.to_string())?;
        }
    }
    // The round trip, for scale.
    chart
        .draw_series(LineSeries::new(
            [(rtt_us, 0.0), (rtt_us, rows as f64)],
            BLACK.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?
        .label(format!(
            "Redis round trip, PING p50 ({})",
            crate::stats::us(rtt_us)
        ))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
