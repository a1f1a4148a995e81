//! The printed table, its markdown copy and the hand-off chart.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

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
        * 2.0;
    let rows = (groups.len() * worker_counts.len()) as i32;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Forced hand-off latency, p50 (log scale; lower is better)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(260)
        .build_cartesian_2d((rtt_us / 4.0..max).log_scale(), 0..rows)
        .map_err(|e| e.to_string())?;
    let labels: Vec<String> = groups
        .iter()
        .flat_map(|g| {
            worker_counts
                .iter()
                .map(move |w| format!("{}, {w} workers", g.library))
        })
        .collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(labels.len())
        .y_label_formatter(&|y| labels.get(*y as usize).cloned().unwrap_or_default())
        .x_desc("microseconds")
        .draw()
        .map_err(|e| e.to_string())?;
    let palette = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
    ];
    for (gi, group) in groups.iter().enumerate() {
        for (wi, w) in worker_counts.iter().enumerate() {
            let Some((_, value)) = group.p50_us.iter().find(|(count, _)| count == w) else {
                continue;
            };
            let y = (gi * worker_counts.len() + wi) as i32;
            let color = if gi == 0 {
                palette[0]
            } else {
                palette[1 + wi % 2]
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(rtt_us / 4.0, y), (*value, y + 1)],
                    color.mix(0.8).filled(),
                )))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(std::iter::once(Text::new(
                    crate::stats::us(*value),
                    (*value * 1.08, y),
                    ("sans-serif", 13),
                )))
                .map_err(|e| e.to_string())?;
        }
    }
    // The round trip, for scale.
    chart
        .draw_series(LineSeries::new(
            [(rtt_us, 0), (rtt_us, rows)],
            BLACK.stroke_width(1),
        ))
        .map_err(|e| e.to_string())?
        .label(format!("Redis round trip ({})", crate::stats::us(rtt_us)));
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
