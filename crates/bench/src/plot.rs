//! Grouped bar charts as PNG, drawn with `plotters` into an RGB buffer and
//! encoded with `png` (no system font or image libraries).
//!
//! Text needs a TrueType font file: `ROOST_PLOT_FONT`, else the first of a few
//! common system paths (Debian's `fonts-dejavu-core` provides the first). With
//! no font the chart is drawn without any text rather than failing.

use std::error::Error;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use thiserror::Error;

const WIDTH_PX: u32 = 1200;
const HEIGHT_PX: u32 = 600;
const MARGIN_PX: i32 = 40;
const FONT_FAMILY: &str = "sans-serif";
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];
/// Size of one panel of a multi-panel figure.
const PANEL_WIDTH_PX: u32 = 900;
const PANEL_HEIGHT_PX: u32 = 520;
/// Most panels one figure holds.
pub const MAX_PANELS: usize = 16;
/// Series colours, in order.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(214, 39, 40),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

#[derive(Debug, Error)]
pub enum PlotError {
    #[error("chart has no categories or no series")]
    Empty,
    #[error("a figure needs 1..={MAX_PANELS} panels and at least one column")]
    Panels,
    #[error("series `{0}` has a different number of values than there are categories")]
    Ragged(String),
    #[error("drawing failed: {0}")]
    Draw(String),
    #[error("cannot write PNG: {0}")]
    Encode(String),
}

/// One bar per category; `None` leaves a gap.
#[derive(Debug, Clone, PartialEq)]
pub struct BarSeries {
    pub name: String,
    pub values: Vec<Option<f64>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<BarSeries>,
}

/// Whether the chart was drawn with text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Labels {
    Drawn,
    SkippedNoFont,
}

impl BarChart {
    fn check(&self) -> Result<(), PlotError> {
        if self.categories.is_empty() || self.series.is_empty() {
            return Err(PlotError::Empty);
        }
        match self
            .series
            .iter()
            .find(|s| s.values.len() != self.categories.len())
        {
            Some(ragged) => Err(PlotError::Ragged(ragged.name.clone())),
            None => Ok(()),
        }
    }

    fn max_value(&self) -> f64 {
        let max = self
            .series
            .iter()
            .flat_map(|s| s.values.iter().flatten())
            .copied()
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        if max > 0.0 {
            max
        } else {
            1.0
        }
    }

    /// x range of bar `series` in `category`: categories sit at integers, the
    /// bars of one category share 80% of its unit width.
    fn bar_span(&self, category: usize, series: usize) -> (f64, f64) {
        let width = 0.8 / self.series.len() as f64;
        let left = category as f64 - 0.4 + width * series as f64;
        (left, left + width)
    }

    /// Renders the chart as a PNG at `path`.
    pub fn render_png(&self, path: &Path) -> Result<Labels, PlotError> {
        render_panels_png(std::slice::from_ref(self), 1, (WIDTH_PX, HEIGHT_PX), path)
    }

    fn draw_labelled(&self, root: &Area<'_>) -> Result<(), Box<dyn Error>> {
        root.fill(&WHITE)?;
        let categories = self.categories.len();
        let y_max = self.max_value() * 1.15;
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, (FONT_FAMILY, 24))
            .margin(20)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5f64..categories as f64 - 0.5, 0f64..y_max)?;
        let category_label = |x: &f64| {
            let nearest = x.round();
            let index = nearest as usize;
            if (x - nearest).abs() < 1e-6 && nearest >= 0.0 && index < categories {
                self.categories[index].clone()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(categories + 1)
            .x_label_formatter(&category_label)
            .y_label_formatter(&|v: &f64| format_short(*v))
            .y_desc(self.y_label.as_str())
            .label_style((FONT_FAMILY, 14))
            .draw()?;
        for (s, series) in self.series.iter().enumerate() {
            let color = PALETTE[s % PALETTE.len()];
            let bars = self
                .bars_of(s)
                .map(move |(x0, x1, v)| Rectangle::new([(x0, 0.0), (x1, v)], color.filled()));
            chart
                .draw_series(bars)?
                .label(series.name.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled())
                });
            let values = self.bars_of(s).map(|(x0, x1, v)| {
                Text::new(
                    format_short(v),
                    ((x0 + x1) / 2.0, v),
                    (FONT_FAMILY, 11).into_font().color(&BLACK).pos(
                        plotters::style::text_anchor::Pos::new(
                            plotters::style::text_anchor::HPos::Center,
                            plotters::style::text_anchor::VPos::Bottom,
                        ),
                    ),
                )
            });
            chart.draw_series(values)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font((FONT_FAMILY, 14))
            .draw()?;
        Ok(())
    }

    /// Bars only, in pixel coordinates, with an axis line: for machines
    /// without a font.
    fn draw_unlabelled(&self, root: &Area<'_>) -> Result<(), Box<dyn Error>> {
        root.fill(&WHITE)?;
        let (width_px, height_px) = root.dim_in_pixel();
        let (width, height) = (f64::from(width_px), f64::from(height_px));
        let plot_w = width - 2.0 * MARGIN_PX as f64;
        let plot_h = height - 2.0 * MARGIN_PX as f64;
        let unit_px = plot_w / self.categories.len() as f64;
        let y_max = self.max_value() * 1.15;
        let to_px = |x: f64, v: f64| -> (i32, i32) {
            let px = MARGIN_PX as f64 + (x + 0.5) * unit_px;
            let py = height - MARGIN_PX as f64 - v / y_max * plot_h;
            (px.round() as i32, py.round() as i32)
        };
        for s in 0..self.series.len() {
            let color = PALETTE[s % PALETTE.len()];
            for (x0, x1, v) in self.bars_of(s) {
                root.draw(&Rectangle::new(
                    [to_px(x0, v), to_px(x1, 0.0)],
                    color.filled(),
                ))?;
            }
        }
        let axis_y = height_px as i32 - MARGIN_PX;
        root.draw(&PathElement::new(
            [(MARGIN_PX, axis_y), (width_px as i32 - MARGIN_PX, axis_y)],
            BLACK,
        ))?;
        Ok(())
    }

    /// (x0, x1, value) of each present bar of series `s`.
    fn bars_of(&self, s: usize) -> impl Iterator<Item = (f64, f64, f64)> + '_ {
        self.series[s]
            .values
            .iter()
            .enumerate()
            .filter_map(|(c, v)| v.filter(|v| v.is_finite()).map(|v| (c, v)))
            .map(move |(c, v)| {
                let (x0, x1) = self.bar_span(c, s);
                (x0, x1, v)
            })
    }
}

/// Renders several charts into one PNG at `path`, `columns` panels per row
/// (rows as needed), each panel [`PANEL_WIDTH_PX`] x [`PANEL_HEIGHT_PX`].
pub fn render_figure_png(
    charts: &[BarChart],
    columns: usize,
    path: &Path,
) -> Result<Labels, PlotError> {
    if columns == 0 || charts.is_empty() || charts.len() > MAX_PANELS {
        return Err(PlotError::Panels);
    }
    let columns = columns.min(charts.len());
    let rows = charts.len().div_ceil(columns);
    let size = (
        PANEL_WIDTH_PX * columns as u32,
        PANEL_HEIGHT_PX * rows as u32,
    );
    render_panels_png(charts, columns, size, path)
}

fn render_panels_png(
    charts: &[BarChart],
    columns: usize,
    (width, height): (u32, u32),
    path: &Path,
) -> Result<Labels, PlotError> {
    for chart in charts {
        chart.check()?;
    }
    let rows = charts.len().div_ceil(columns);
    let mut rgb = vec![0u8; (width * height * 3) as usize];
    let labelled = sans_serif_font_registered();
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (width, height)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| PlotError::Draw(e.to_string()))?;
        let panels = root.split_evenly((rows, columns));
        for (chart, panel) in charts.iter().zip(&panels) {
            let drawn = if labelled {
                chart.draw_labelled(panel)
            } else {
                chart.draw_unlabelled(panel)
            };
            drawn.map_err(|e| PlotError::Draw(e.to_string()))?;
        }
        root.present().map_err(|e| PlotError::Draw(e.to_string()))?;
    }
    write_png(path, &rgb, width, height).map_err(|e| PlotError::Encode(e.to_string()))?;
    Ok(if labelled {
        Labels::Drawn
    } else {
        Labels::SkippedNoFont
    })
}

/// 1_234_567.0 -> "1.23M", 12_345.0 -> "12.3k", 1.5 -> "1.50".
fn format_short(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else if value >= 10.0 || value == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

fn write_png(path: &Path, rgb: &[u8], width: u32, height: u32) -> Result<(), Box<dyn Error>> {
    let writer = BufWriter::new(File::create(path)?);
    let mut encoder = png::Encoder::new(writer, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut png_writer = encoder.write_header()?;
    png_writer.write_image_data(rgb)?;
    png_writer.finish()?;
    Ok(())
}

/// Registers the first usable font as `sans-serif`, once per process.
fn sans_serif_font_registered() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        let from_env = std::env::var("ROOST_PLOT_FONT").ok();
        let candidates = from_env
            .iter()
            .map(String::as_str)
            .chain(FONT_CANDIDATES.iter().copied());
        for path in candidates {
            let Ok(bytes) = std::fs::read(path) else {
                continue;
            };
            // One font per process, kept for plotters' 'static font table.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if register_font(FONT_FAMILY, FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
        false
    })
}

/// Reports how drawing `path` went and returns the path if a PNG was written:
/// a missing font or a failed chart is a warning, never an error.
pub fn finish_png(drawn: Result<Labels, PlotError>, path: PathBuf) -> Option<PathBuf> {
    match drawn {
        Ok(Labels::Drawn) => Some(path),
        Ok(Labels::SkippedNoFont) => {
            eprintln!(
                "warning: no TrueType font found (install fonts-dejavu-core or set ROOST_PLOT_FONT); {} has no text",
                path.display()
            );
            Some(path)
        }
        Err(e) => {
            eprintln!("warning: could not draw {}: {e}", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_chart() -> BarChart {
        BarChart {
            title: "test".into(),
            y_label: "tps".into(),
            categories: vec!["a".into(), "b".into(), "c".into()],
            series: vec![
                BarSeries {
                    name: "x".into(),
                    values: vec![Some(1e6), Some(2e5), None],
                },
                BarSeries {
                    name: "y".into(),
                    values: vec![Some(5e5), Some(f64::NAN), Some(3.0)],
                },
            ],
        }
    }

    fn temp_png(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("roost-plot-{}-{name}.png", std::process::id()))
    }

    #[test]
    fn renders_a_png() {
        let path = temp_png("full");
        sample_chart().render_png(&path).expect("render");
        let bytes = std::fs::read(&path).expect("read png");
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        std::fs::remove_file(&path).expect("clean up");
    }

    #[test]
    fn renders_without_a_font() {
        let chart = sample_chart();
        let mut rgb = vec![0u8; (WIDTH_PX * HEIGHT_PX * 3) as usize];
        {
            let root =
                BitMapBackend::with_buffer(&mut rgb, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
            chart.draw_unlabelled(&root).expect("draw");
            root.present().expect("present");
        }
        assert!(rgb.iter().any(|&b| b != 255), "something was drawn");
    }

    #[test]
    fn bad_charts_are_errors() {
        let mut chart = sample_chart();
        chart.series[0].values.pop();
        assert!(matches!(
            chart.render_png(&temp_png("ragged")),
            Err(PlotError::Ragged(_))
        ));
        chart.series.clear();
        assert!(matches!(
            chart.render_png(&temp_png("empty")),
            Err(PlotError::Empty)
        ));
    }

    #[test]
    fn short_numbers() {
        assert_eq!(format_short(1_234_567.0), "1.23M");
        assert_eq!(format_short(12_345.0), "12.3k");
        assert_eq!(format_short(12.0), "12");
        assert_eq!(format_short(1.523), "1.52");
        assert_eq!(format_short(0.0), "0");
    }

    #[test]
    fn renders_a_multi_panel_figure() {
        let path = temp_png("panels");
        let charts = vec![sample_chart(), sample_chart(), sample_chart()];
        render_figure_png(&charts, 2, &path).expect("render");
        let bytes = std::fs::read(&path).expect("read png");
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        std::fs::remove_file(&path).expect("clean up");
        assert!(matches!(
            render_figure_png(&charts, 0, &path),
            Err(PlotError::Panels)
        ));
        assert!(matches!(
            render_figure_png(&[], 2, &path),
            Err(PlotError::Panels)
        ));
    }
}
