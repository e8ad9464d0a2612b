//! `--plot FILE.svg`: two bar charts side by side, throughput and p99 latency per strategy,
//! each bar labelled with its value, the title carrying the scenario, so the picture reads
//! without the table. Hand-written SVG: a few rectangles do not need a plotting crate.

use super::report::Summary;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 420.0;
const PANEL_W: f64 = 400.0;
const PANEL_H: f64 = 280.0;
const TOP: f64 = 80.0;
const COLORS: &[&str] = &[
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn panel(out: &mut String, x0: f64, title: &str, bars: &[(String, f64, String)]) {
    let max = bars.iter().map(|b| b.1).fold(0.0_f64, f64::max).max(1e-9);
    out.push_str(&format!(
        "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
        x0 + PANEL_W / 2.0,
        TOP - 12.0,
        escape(title)
    ));
    let base = TOP + PANEL_H;
    out.push_str(&format!(
        "<line x1=\"{x0:.0}\" y1=\"{base:.0}\" x2=\"{:.0}\" y2=\"{base:.0}\" stroke=\"#333\"/>\n",
        x0 + PANEL_W
    ));
    let slot = PANEL_W / bars.len().max(1) as f64;
    for (i, (label, value, text)) in bars.iter().enumerate() {
        let h = (value / max) * (PANEL_H - 30.0);
        let x = x0 + slot * i as f64 + slot * 0.2;
        let w = slot * 0.6;
        out.push_str(&format!(
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{}\"/>\n",
            base - h,
            COLORS[i % COLORS.len()]
        ));
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"13\" text-anchor=\"middle\">{}</text>\n",
            x + w / 2.0,
            base - h - 6.0,
            escape(text)
        ));
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"13\" text-anchor=\"middle\">{}</text>\n",
            x + w / 2.0,
            base + 18.0,
            escape(label)
        ));
    }
}

/// The SVG document for `summaries`.
pub fn svg(title: &str, summaries: &[Summary]) -> String {
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{:.0}\" y=\"30\" font-size=\"18\" text-anchor=\"middle\">{}</text>\n",
        WIDTH / 2.0,
        escape(title)
    );
    let throughput: Vec<(String, f64, String)> = summaries
        .iter()
        .map(|s| {
            (
                s.strategy.clone(),
                s.ops_per_s,
                format!("{:.0}/s", s.ops_per_s),
            )
        })
        .collect();
    let p99: Vec<(String, f64, String)> = summaries
        .iter()
        .map(|s| {
            let ms = s.latency_us_p99 as f64 / 1000.0;
            (s.strategy.clone(), ms, format!("{ms:.1} ms"))
        })
        .collect();
    panel(
        &mut out,
        40.0,
        "operations per second (higher is better)",
        &throughput,
    );
    panel(&mut out, 480.0, "p99 latency (lower is better)", &p99);
    out.push_str(&format!(
        "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"11\" text-anchor=\"middle\" fill=\"#555\">\
         medians across rounds; latency from the intended send time</text>\n</svg>\n",
        WIDTH / 2.0,
        HEIGHT - 12.0
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_names_every_strategy_and_value() {
        let s = |name: &str, tput: f64, p99: u64| Summary {
            strategy: name.into(),
            rounds: 1,
            ops_per_s: tput,
            latency_us_p50: 1,
            latency_us_p90: 1,
            latency_us_p99: p99,
            latency_us_p999: 1,
            refused: 0,
            overloaded: 0,
            errors: 0,
            peak_rss_kib: None,
            mean_batch: None,
            invariants_ok: true,
        };
        let doc = svg(
            "hot <256>",
            &[s("atomic", 900.0, 250_000), s("batched", 20_000.0, 12_500)],
        );
        for needle in [
            "atomic",
            "batched",
            "900/s",
            "20000/s",
            "250.0 ms",
            "12.5 ms",
            "hot &lt;256&gt;",
        ] {
            assert!(doc.contains(needle), "missing {needle}");
        }
        assert!(doc.starts_with("<svg") && doc.trim_end().ends_with("</svg>"));
    }
}
