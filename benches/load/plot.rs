//! The latency-vs-concurrency plot (PNG), drawn from the sweep's results.

use std::path::Path;

use serde_json::Value;

use crate::report::Report;

pub(crate) fn load_font() -> Result<(), String> {
    use plotters::style::{FontStyle, register_font};
    let candidates = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    ];
    let bytes = candidates
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .ok_or("no TrueType font found (install fonts-dejavu-core)")?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| "bad font file".to_owned())
}

/// Two panels, p50 and p99, latency (ms, log) against connections (log 2).
/// The sweep's series from the results.jsonl of a run, in the order they appear.
pub(crate) fn sweep_from_jsonl(path: &Path) -> Vec<Series> {
    let text = std::fs::read_to_string(path).expect("results.jsonl");
    let mut series: Vec<Series> = Vec::new();
    for row in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        if row["scenario"] != "sweep" {
            continue;
        }
        let name = row["variant"].as_str().unwrap_or("?").to_owned();
        let point = (
            row["conns"].as_u64().unwrap_or(0) as usize,
            row["p50_ms"].as_f64().unwrap_or(f64::NAN),
            row["p99_ms"].as_f64().unwrap_or(f64::NAN),
        );
        match series.iter_mut().find(|(n, _)| *n == name) {
            Some((_, points)) => points.push(point),
            None => series.push((name, vec![point])),
        }
    }
    series
}

/// A line of the plot: its name and (connections, p50 ms, p99 ms) points.
pub(crate) type Series = (String, Vec<(usize, f64, f64)>);

pub(crate) fn draw_plot(path: &Path, series: &[Series]) -> Result<(), String> {
    use plotters::prelude::*;
    load_font()?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    }
    let root = BitMapBackend::new(path, (1400, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (title, body) = root.split_vertically(50);
    title
        .titled(
            "mcp-task-gateway: latency against concurrency (tools/call echo, tasks/get)",
            ("sans-serif", 24),
        )
        .map_err(|e| e.to_string())?;
    let panels = body.split_evenly((1, 2));
    let max_conns = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.0))
        .max()
        .unwrap_or(64) as f64;
    let conn_ticks: Vec<f64> = series
        .first()
        .map(|(_, p)| p.iter().map(|x| x.0 as f64).collect())
        .unwrap_or_default();
    let finite = |v: f64| v.is_finite() && v > 0.0;
    let all: Vec<f64> = series
        .iter()
        .flat_map(|(_, p)| p.iter().flat_map(|x| [x.1, x.2]))
        .filter(|v| finite(*v))
        .collect();
    let y_min = all.iter().copied().fold(f64::INFINITY, f64::min).max(0.01) * 0.8;
    let y_max = all.iter().copied().fold(0.0, f64::max) * 1.25;
    let colors = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x94, 0x67, 0xbd),
    ];
    for (panel, (label, pick)) in panels
        .iter()
        .zip([("p50 latency (ms)", 0usize), ("p99 latency (ms)", 1usize)])
    {
        let mut chart = ChartBuilder::on(panel)
            .margin(16)
            .caption(label, ("sans-serif", 20))
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(
                (1f64..max_conns * 1.1)
                    .log_scale()
                    .with_key_points(conn_ticks.clone()),
                (y_min..y_max.max(y_min * 2.0)).log_scale(),
            )
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("connections (concurrent clients)")
            .y_desc(label)
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.2}"))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (name, points)) in series.iter().enumerate() {
            let color = colors[i % colors.len()];
            let data: Vec<(f64, f64)> = points
                .iter()
                .map(|&(c, p50, p99)| (c as f64, if pick == 0 { p50 } else { p99 }))
                .filter(|(_, v)| finite(*v))
                .collect();
            chart
                .draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(data.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 15))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// Notes are printed after the table they belong to.
impl Report {
    pub(crate) fn flush_notes(&mut self) {
        if self.pending_notes.is_empty() {
            return;
        }
        self.out("");
        let notes = std::mem::take(&mut self.pending_notes);
        for note in notes {
            self.out(&format!("- {note}"));
        }
    }
}
