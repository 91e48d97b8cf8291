//! The handoff-latency distribution as an SVG CDF (log time axis).

use std::path::Path;

use plotters::prelude::*;

const COLORS: [RGBColor; 6] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// Plots one CDF per contender (samples in µs; values under 1 µs are drawn
/// at 1 µs) and a vertical line at the PING round trip.
pub fn handoff_cdf(
    path: &Path,
    series: &[(&str, Vec<f64>)],
    ping_us: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let max = series
        .iter()
        .flat_map(|(_, s)| s.iter().copied())
        .fold(1_000.0f64, f64::max)
        * 1.5;
    let root = SVGBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Lock handoff latency: unlock() returned -> next waiter's lock() returned",
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(56)
        .build_cartesian_2d((10.0f64..max).log_scale(), 0.0f64..1.0f64)?;
    chart
        .configure_mesh()
        .x_desc("latency (µs, log scale)")
        .y_desc("fraction of handoffs ≤ x")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    for (i, (label, samples)) in series.iter().enumerate() {
        let mut s: Vec<f64> = samples.iter().map(|v| v.max(10.0)).collect();
        s.sort_by(f64::total_cmp);
        let n = s.len().max(1) as f64;
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.iter().enumerate().map(|(j, v)| (*v, (j + 1) as f64 / n)),
                color.stroke_width(2),
            ))?
            .label(*label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    let gray = RGBColor(0x60, 0x60, 0x60);
    chart
        .draw_series(LineSeries::new(
            vec![(ping_us.max(10.0), 0.0), (ping_us.max(10.0), 1.0)],
            gray.stroke_width(1),
        ))?
        .label(format!("PING round trip p50 ({ping_us:.0} µs)"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], gray.stroke_width(1)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
