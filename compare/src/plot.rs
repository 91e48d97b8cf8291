//! The report's SVG plots: the handoff-latency distribution as a CDF (log
//! time axis), and the fleet benchmark's commands/s against fleet size.

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

/// One line of the fleet plot: its label, a color (index into the
/// palette), dashed or not, and its (size, commands/s) points.
pub type FleetSeries = (String, usize, bool, Vec<(f64, f64)>);

/// The fleet benchmark's Redis commands/s against fleet size, log-log:
/// one line with its points per series; values under 0.1/s are drawn at
/// 0.1.
pub fn fleet_commands(
    path: &Path,
    series: &[FleetSeries],
) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let ys = series.iter().flat_map(|s| s.3.iter().map(|p| p.1.max(0.1)));
    let (lo, hi) = ys.fold((f64::MAX, 0.1f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let (lo, hi) = ((lo.min(hi) / 2.0).max(0.05), hi * 2.0);
    let root = SVGBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Redis commands/s while waiters wait (10 clients), and for held leases",
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d((70.0f64..14_000.0f64).log_scale(), (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("waiters (or held leases), log scale")
        .y_desc("Redis commands/s (scripts' inner commands included), log scale")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| {
            if *v < 1.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.0}")
            }
        })
        .draw()?;
    for (label, color, dashed, points) in series {
        let color = COLORS[color % COLORS.len()];
        let style = color.stroke_width(2);
        let points: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (x, y.max(0.1))).collect();
        let drawn = if *dashed {
            chart.draw_series(DashedLineSeries::new(points.clone(), 8, 5, style))?
        } else {
            chart.draw_series(LineSeries::new(points.clone(), style))?
        };
        let dashed = *dashed;
        drawn.label(label.as_str()).legend(move |(x, y)| {
            let gap = if dashed { 6 } else { 0 };
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (10 - gap / 2, 0)], style)
                + PathElement::new(vec![(10 + gap / 2, 0), (20, 0)], style)
        });
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
