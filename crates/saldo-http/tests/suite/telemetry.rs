//! The exposition follows Prometheus conventions: every family has HELP and TYPE, the counters
//! an alert divides or differentiates exist (at zero) before their first event, the process
//! and build-info families are there, and the alert rules and the dashboard name only families
//! the service exports. `.ci/telemetry` runs `promtool check metrics` on a real `saldo serve`.

use std::collections::BTreeSet;
use std::sync::Mutex;

use saldo::telemetry;

use crate::support::spawn_app;

/// The families of an exposition: the names of its sample lines, histogram suffixes removed.
fn sample_families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(|name| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|base| text.contains(&format!("# TYPE {base} histogram")))
                .unwrap_or(name)
                .to_owned()
        })
        .collect()
}

/// The families named by `# <kind> <family> …` lines.
fn declared(text: &str, kind: &str) -> BTreeSet<String> {
    let prefix = format!("# {kind} ");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| rest.split(' ').next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn every_family_has_help_and_type() {
    let app = spawn_app().await;
    // One request first, so the request-duration histogram has a sample to render.
    app.get("/healthz").await;
    let text = app.get("/metrics").await.text;
    let families = sample_families(&text);
    let help = declared(&text, "HELP");
    let types = declared(&text, "TYPE");
    assert!(families.len() >= 30, "{families:?}");
    let missing_help: Vec<_> = families.difference(&help).collect();
    let missing_type: Vec<_> = families.difference(&types).collect();
    assert!(missing_help.is_empty(), "no HELP for {missing_help:?}");
    assert!(missing_type.is_empty(), "no TYPE for {missing_type:?}");
    for counter in declared_counters(&text) {
        assert!(
            counter.ends_with("_total"),
            "counter {counter} lacks _total"
        );
    }
}

fn declared_counters(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn counters_exist_before_their_first_event() {
    let app = spawn_app().await;
    let text = app.get("/metrics").await.text;
    // Series nothing in this suite provokes (no deadlock, give-up or CHECK violation is staged
    // here): present only because they were registered at zero.
    let mut expected = vec![
        "saldo_pg_deadlocks_total".to_owned(),
        "saldo_orders_confirmed_with_missing_total".to_owned(),
        r#"saldo_refusals_total{stock="enough"}"#.to_owned(),
        r#"saldo_http_connections_closed_total{reason="stalled"}"#.to_owned(),
        r#"saldo_reservations_settled_total{status="expired"}"#.to_owned(),
        format!(
            r#"saldo_build_info{{version="{}"}} 1"#,
            env!("CARGO_PKG_VERSION")
        ),
        "process_resident_memory_bytes".to_owned(),
        "process_open_fds".to_owned(),
        "process_cpu_seconds_total".to_owned(),
        "process_start_time_seconds".to_owned(),
        "process_threads".to_owned(),
    ];
    for operation in saldo::Operation::SERVED.iter().map(|o| o.as_str()) {
        expected.push(format!(
            r#"saldo_check_violations_total{{operation="{operation}"}}"#
        ));
        expected.push(format!(r#"saldo_tx_total{{operation="{operation}"}}"#));
        for &sqlstate in telemetry::RETRY_SQLSTATES {
            for family in [telemetry::TX_RETRIES, telemetry::TX_GIVEUPS] {
                expected.push(format!(
                    r#"{family}{{operation="{operation}",sqlstate="{sqlstate}"}}"#
                ));
            }
        }
    }
    let missing: Vec<_> = expected
        .iter()
        .filter(|series| !text.lines().any(|l| l.starts_with(series.as_str())))
        .collect();
    assert!(missing.is_empty(), "absent before any event: {missing:?}");
}

/// Every family the service describes (its own, the library's through
/// `saldo::telemetry::describe`, the process ones), as `saldo_http::metrics::describe` names
/// them to a recorder of this test's own.
fn described_families() -> BTreeSet<String> {
    use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};

    #[derive(Default)]
    struct Described(Mutex<BTreeSet<String>>);
    impl Described {
        fn add(&self, key: KeyName) {
            let mut names = self.0.lock().unwrap_or_else(|e| e.into_inner());
            names.insert(key.as_str().to_owned());
        }
    }
    impl metrics::Recorder for Described {
        fn describe_counter(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
            self.add(key);
        }
        fn describe_gauge(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
            self.add(key);
        }
        fn describe_histogram(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
            self.add(key);
        }
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    let described = Described::default();
    metrics::with_local_recorder(&described, saldo_http::metrics::describe);
    let names = described.0.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(
        names.contains(telemetry::TX_RETRIES) && names.contains(saldo_http::metrics::HTTP_DURATION),
        "the library's and the service's families: {names:?}"
    );
    names
}

/// Metric names in a rules or dashboard file: `saldo_…` and `process_…` words.
fn referenced(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("saldo_") || word.starts_with("process_") {
            names.insert(word.to_owned());
        }
    }
    names
}

#[tokio::test]
async fn alerts_and_dashboard_name_only_exported_families() {
    let app = spawn_app().await;
    app.get("/healthz").await;
    let text = app.get("/metrics").await.text;
    // Rendered families, and every family the service describes: a histogram renders only
    // once it has a sample, and the connection gauges only once a listener sets them.
    let mut exported = sample_families(&text);
    exported.extend(described_families());
    let series: BTreeSet<String> = exported
        .iter()
        .flat_map(|f| {
            ["", "_bucket", "_sum", "_count"]
                .into_iter()
                .map(move |s| format!("{f}{s}"))
        })
        .collect();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");
    for file in ["prometheus/alerts.yml", "grafana/saldo.json"] {
        let path = format!("{root}/{file}");
        let body = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let unknown: Vec<_> = referenced(&body)
            .into_iter()
            .filter(|n| !series.contains(n))
            .collect();
        assert!(
            unknown.is_empty(),
            "{file} names unknown metrics {unknown:?}"
        );
    }
}
