//! SVG line charts (plotters' SVG backend). Text is laid out with a bundled DejaVu Sans, so a
//! plot is the same file on every machine.

use std::sync::Once;

use plotters::prelude::*;

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

#[derive(Debug, thiserror::Error)]
#[error("drawing the plot: {0}")]
pub struct PlotError(String);

impl PlotError {
    pub fn new(why: impl Into<String>) -> Self {
        PlotError(why.into())
    }
}

/// One named line of points.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// Adds `point` to the series called `name`, starting it (after the others) if new.
    pub fn add_point(series: &mut Vec<Series>, name: &str, point: (f64, f64)) {
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(point),
            None => series.push(Series {
                name: name.to_string(),
                points: vec![point],
            }),
        }
    }
}

/// A chart of lines sharing axes.
#[derive(Debug)]
pub struct LineChart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Logarithmic x axis (base 2 ticks for message sizes).
    pub log_x: bool,
    /// How x tick labels are written.
    pub x_ticks: fn(f64) -> String,
    pub series: &'a [Series],
}

/// A parity plot: predicted (y) against measured (x), points only, with the line y = x and
/// relative error bands around it.
#[derive(Debug)]
pub struct ParityChart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Relative errors drawn as dashed pairs of lines, e.g. 0.05 for ±5%.
    pub bands: &'a [f64],
    pub series: &'a [Series],
}

/// Colours of successive series (matplotlib's tab10).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Renders `chart` as an SVG document; both axes span the same range.
pub fn parity_chart_svg(chart: &ParityChart) -> Result<String, PlotError> {
    register_font()?;
    let values = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().flat_map(|&(x, y)| [x, y]));
    let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() {
        return Err(PlotError("there are no points to plot".into()));
    }
    let (lo, hi) = ((lo * 0.8).max(0.0), hi * 1.15);
    let err = |e: &dyn std::fmt::Display| PlotError(e.to_string());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 700)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut ctx = ChartBuilder::on(&root)
            .caption(chart.title, (FAMILY, 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(lo..hi, lo..hi)
            .map_err(|e| err(&e))?;
        ctx.configure_mesh()
            .x_desc(chart.x_label)
            .y_desc(chart.y_label)
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 15))
            .draw()
            .map_err(|e| err(&e))?;
        ctx.draw_series(LineSeries::new([(lo, lo), (hi, hi)], BLACK.stroke_width(1)))
            .map_err(|e| err(&e))?
            .label("predicted = measured")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK));
        for (i, band) in chart.bands.iter().enumerate() {
            let grey = RGBColor(150, 150, 150);
            for sign in [1.0, -1.0] {
                let f = 1.0 + sign * band;
                let dashes = DashedLineSeries::new(
                    [(lo, lo * f), (hi, hi * f)],
                    4 + 4 * i as u32,
                    4,
                    grey.stroke_width(1),
                );
                let drawn = ctx.draw_series(dashes).map_err(|e| err(&e))?;
                if sign > 0.0 {
                    drawn
                        .label(format!("±{:.0}%", band * 100.0))
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey));
                }
            }
        }
        for (i, s) in chart.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 5, color.filled())))
                .map_err(|e| err(&e))?
                .label(s.name.as_str())
                .legend(move |(x, y)| Circle::new((x + 9, y), 5, color.filled()));
        }
        draw_legend(&mut ctx)?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// The legend of every chart: the series' names in a box at the upper left.
fn draw_legend<'a, DB, CT>(ctx: &mut ChartContext<'a, DB, CT>) -> Result<(), PlotError>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: CoordTranslate,
{
    ctx.configure_series_labels()
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| PlotError(e.to_string()))
}

fn register_font() -> Result<(), PlotError> {
    static REGISTER: Once = Once::new();
    let mut result = Ok(());
    REGISTER.call_once(|| {
        result = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
            .map_err(|_| PlotError("the bundled font does not parse".into()));
    });
    result
}

/// Renders `chart` as an SVG document.
pub fn line_chart_svg(chart: &LineChart) -> Result<String, PlotError> {
    register_font()?;
    let points = || chart.series.iter().flat_map(|s| s.points.iter().copied());
    let (mut x_min, mut x_max) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut y_min, mut y_max) = (0.0f64, 0.0f64);
    for (x, y) in points() {
        x_min = x_min.min(x);
        x_max = x_max.max(x);
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    if !x_min.is_finite() {
        return Err(PlotError("there are no points to plot".into()));
    }
    if x_max <= x_min {
        x_max = x_min * 2.0 + 1.0;
    }
    // Room around the outermost points, so that none is cut in half by an axis or an edge.
    let (x_min, x_max) = if chart.log_x {
        (x_min / 1.15, x_max * 1.15)
    } else {
        let pad = 0.04 * (x_max - x_min);
        (x_min - pad, x_max + pad)
    };
    let y_max = if y_max > 0.0 { y_max * 1.08 } else { 1.0 };
    let y_min = y_min - 0.03 * (y_max - y_min);
    let names = legend_names(chart.series);
    let err = |e: &dyn std::fmt::Display| PlotError(e.to_string());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1200, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        // The legend has a column of its own at the right: it hides no point.
        let (plot, legend) = root.split_horizontally(880);
        let mut builder = ChartBuilder::on(&plot);
        builder
            .caption(chart.title, (FAMILY, 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64);
        macro_rules! draw {
            ($ctx:expr) => {{
                let mut ctx = $ctx;
                ctx.configure_mesh()
                    .x_desc(chart.x_label)
                    .y_desc(chart.y_label)
                    .label_style((FAMILY, 14))
                    .axis_desc_style((FAMILY, 15))
                    .x_label_formatter(&|x| (chart.x_ticks)(*x))
                    .draw()
                    .map_err(|e| err(&e))?;
                for (i, s) in chart.series.iter().enumerate() {
                    let color = PALETTE[i % PALETTE.len()];
                    ctx.draw_series(LineSeries::new(
                        s.points.iter().copied(),
                        color.stroke_width(2),
                    ))
                    .map_err(|e| err(&e))?;
                    ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                        .map_err(|e| err(&e))?;
                }
            }};
        }
        if chart.log_x {
            draw!(
                builder
                    .build_cartesian_2d((x_min..x_max).log_scale().base(2.0), y_min..y_max)
                    .map_err(|e| err(&e))?
            );
        } else {
            draw!(
                builder
                    .build_cartesian_2d(x_min..x_max, y_min..y_max)
                    .map_err(|e| err(&e))?
            );
        }
        for (i, name) in names.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let y = 60 + 22 * i as i32;
            legend
                .draw(&PathElement::new(
                    vec![(4, y), (22, y)],
                    color.stroke_width(2),
                ))
                .map_err(|e| err(&e))?;
            legend
                .draw(&Circle::new((13, y), 3, color.filled()))
                .map_err(|e| err(&e))?;
            legend
                .draw(&Text::new(
                    name.as_str(),
                    (28, y - 8),
                    (FAMILY, 14).into_font(),
                ))
                .map_err(|e| err(&e))?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// Each series' name in the legend; one whose points are all another's (drawn under it) says
/// so, e.g. `auto (same as metis)`.
fn legend_names(series: &[Series]) -> Vec<String> {
    series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            match series[..i]
                .iter()
                .rev()
                .find(|earlier| earlier.points == s.points)
            {
                Some(earlier) => format!("{} (same as {})", s.name, earlier.name),
                None => s.name.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_names_its_axes_and_series() {
        let series = [Series {
            name: "busbw".into(),
            points: vec![(1024.0, 1.0), (2048.0, 2.0), (4096.0, 3.5)],
        }];
        let svg = line_chart_svg(&LineChart {
            title: "all-reduce",
            x_label: "size (B)",
            y_label: "busbw (GB/s)",
            log_x: true,
            x_ticks: |x| format!("{x:.0}"),
            series: &series,
        })
        .expect("renders");
        assert!(svg.starts_with("<svg"));
        for text in ["all-reduce", "size (B)", "busbw (GB/s)", "busbw", "<circle"] {
            assert!(svg.contains(text), "missing {text}");
        }
    }

    #[test]
    fn no_points_is_an_error() {
        let e = line_chart_svg(&LineChart {
            title: "t",
            x_label: "x",
            y_label: "y",
            log_x: false,
            x_ticks: |x| format!("{x}"),
            series: &[],
        });
        assert!(e.is_err());
    }
}
