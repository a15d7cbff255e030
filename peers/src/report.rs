//! What the runs measured, per contender, and how it is shown: the tables
//! printed at the end and the lateness plot.

use std::collections::BTreeMap;
use std::path::Path;

use crate::harness::Scenario;
use crate::{Contender, Printed};

#[derive(Default)]
pub(crate) struct Measured {
    pub(crate) throughput: Vec<f64>,
    pub(crate) lateness: Vec<f64>,
    pub(crate) early: usize,
    pub(crate) inserted_late: usize,
    /// Tasks that had not run when the contender gave up.
    pub(crate) not_run: usize,
    /// Throughput runs that gave up before every task ran.
    pub(crate) throughput_cut: usize,
    pub(crate) repeats: usize,
    pub(crate) idle_cpu_ms: Vec<f64>,
    pub(crate) idle_statements: Vec<f64>,
    pub(crate) single: Vec<f64>,
    pub(crate) batch: Vec<f64>,
    pub(crate) drain: Vec<f64>,
    pub(crate) drain_cpu_us: Vec<f64>,
    /// Drain runs that gave up before every task ran.
    pub(crate) drain_cut: usize,
    pub(crate) burst: Vec<f64>,
    pub(crate) sustained: Vec<f64>,
    /// Burst and sustained tasks that ran early, not run, inserted late.
    pub(crate) long_early: usize,
    pub(crate) long_not_run: usize,
    pub(crate) long_inserted_late: usize,
    pub(crate) failures: Vec<String>,
}

pub(crate) type Results = BTreeMap<String, Measured>;

fn num(p: &Printed, key: &str) -> Option<f64> {
    p.get(key)?.parse().ok()
}

pub(crate) fn record(m: &mut Measured, scenario: Scenario, p: &Printed) -> String {
    m.repeats += num(p, "repeats").unwrap_or(0.0) as usize;
    match scenario {
        Scenario::Throughput => {
            let v = num(p, "tasks_per_s").unwrap_or(f64::NAN);
            m.throughput.push(v);
            let not_run = num(p, "not_run").unwrap_or(0.0) as usize;
            if not_run > 0 {
                m.throughput_cut += 1;
                return format!("{v:.0} tasks/s ({not_run} not run within the time limit)");
            }
            format!("{v:.0} tasks/s")
        }
        Scenario::Precision => {
            let l: Vec<f64> = p
                .get("lateness_ms")
                .map(|s| s.split(' ').filter_map(|v| v.parse().ok()).collect())
                .unwrap_or_default();
            m.early += l.iter().filter(|&&v| v < 0.0).count();
            m.inserted_late += num(p, "inserted_late").unwrap_or(0.0) as usize;
            let not_run = num(p, "not_run").unwrap_or(0.0) as usize;
            m.not_run += not_run;
            // A task that never ran counts as infinitely late.
            let mut sorted = l.clone();
            sorted.extend(std::iter::repeat_n(f64::INFINITY, not_run));
            m.lateness
                .extend(std::iter::repeat_n(f64::INFINITY, not_run));
            sorted.sort_by(f64::total_cmp);
            m.lateness.extend(l);
            format!(
                "p50 {:.1} ms, p99 {:.1} ms",
                percentile(&sorted, 0.5),
                percentile(&sorted, 0.99)
            )
        }
        Scenario::Insert => {
            let s = num(p, "single_per_s").unwrap_or(f64::NAN);
            m.single.push(s);
            let b = num(p, "batch_per_s");
            if let Some(b) = b {
                m.batch.push(b);
            }
            format!(
                "{s:.0} single/s, batch {}",
                b.map_or("-".into(), |b| format!("{b:.0}/s"))
            )
        }
        Scenario::Drain => {
            let v = num(p, "tasks_per_s").unwrap_or(f64::NAN);
            m.drain.push(v);
            let cpu = num(p, "cpu_us_per_task");
            if let Some(cpu) = cpu {
                m.drain_cpu_us.push(cpu);
            }
            let not_run = num(p, "not_run").unwrap_or(0.0) as usize;
            if not_run > 0 {
                m.drain_cut += 1;
            }
            format!(
                "{v:.0} tasks/s, CPU {} µs a task{}",
                cpu.map_or("-".into(), |c| format!("{c:.0}")),
                if not_run > 0 {
                    format!(" ({not_run} not run within the time limit)")
                } else {
                    String::new()
                }
            )
        }
        Scenario::Burst | Scenario::Sustained => {
            let mut l: Vec<f64> = p
                .get("lateness_ms")
                .map(|s| s.split(' ').filter_map(|v| v.parse().ok()).collect())
                .unwrap_or_default();
            m.long_early += l.iter().filter(|&&v| v < 0.0).count();
            m.long_inserted_late += num(p, "inserted_late").unwrap_or(0.0) as usize;
            let not_run = num(p, "not_run").unwrap_or(0.0) as usize;
            m.long_not_run += not_run;
            l.extend(std::iter::repeat_n(f64::INFINITY, not_run));
            let mut sorted = l.clone();
            sorted.sort_by(f64::total_cmp);
            let summary = format!(
                "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms{}",
                percentile(&sorted, 0.5),
                percentile(&sorted, 0.99),
                sorted.last().copied().unwrap_or(f64::NAN),
                match num(p, "inserted_s") {
                    Some(s) => format!(", inserted in {s:.1} s"),
                    None => String::new(),
                }
            );
            if scenario == Scenario::Burst {
                m.burst.extend(l);
            } else {
                m.sustained.extend(l);
            }
            summary
        }
        Scenario::Idle => String::new(),
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some(if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    })
}

fn cell(v: Option<f64>, decimals: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.decimals$}"))
}

pub(crate) fn table(contenders: &[Contender], results: &mut Results, scenarios: &[Scenario]) {
    let first = [
        Scenario::Throughput,
        Scenario::Precision,
        Scenario::Idle,
        Scenario::Insert,
    ];
    if scenarios.iter().any(|s| first.contains(s)) {
        first_table(contenders, results);
    }
    long_table(contenders, results);
}

fn first_table(contenders: &[Contender], results: &mut Results) {
    println!();
    println!(
        "| contender | throughput, tasks/s | precision p50 / p99 / max, ms | early | repeats | idle CPU, ms/min | idle statements/min | single inserts/s | batch of 10,000, tasks/s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for c in contenders {
        let m = results.entry(c.key()).or_default();
        let precision = lateness_cell(&mut m.lateness);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.label(),
            cell(median(&m.throughput), 0),
            precision,
            m.early,
            m.repeats,
            cell(median(&m.idle_cpu_ms), 0),
            cell(median(&m.idle_statements), 0),
            cell(median(&m.single), 0),
            cell(median(&m.batch), 0),
        );
    }
}

/// Lateness as `p50 / p99 / max` in ms (sorting `v`), `–` when none.
fn lateness_cell(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return "–".to_owned();
    }
    let ms = |v: f64| {
        if v.is_finite() {
            format!("{v:.1}")
        } else {
            "not run".to_owned()
        }
    };
    format!(
        "{} / {} / {}",
        ms(percentile(v, 0.5)),
        ms(percentile(v, 0.99)),
        ms(v.last().copied().unwrap_or(f64::NAN))
    )
}

fn long_table(contenders: &[Contender], results: &mut Results) {
    if contenders.iter().any(|c| {
        let m = &results[&c.key()];
        !(m.drain.is_empty() && m.burst.is_empty() && m.sustained.is_empty())
    }) {
        println!();
        println!(
            "| contender | drain, tasks/s | drain CPU, µs a task | burst lateness p50 / p99 / max, ms | sustained lateness p50 / p99 / max, ms | early |"
        );
        println!("|---|---:|---:|---:|---:|---:|");
        for c in contenders {
            let m = results.entry(c.key()).or_default();
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                c.label(),
                cell(median(&m.drain), 0),
                cell(median(&m.drain_cpu_us), 0),
                lateness_cell(&mut m.burst),
                lateness_cell(&mut m.sustained),
                m.long_early,
            );
        }
    }
    for c in contenders {
        let m = &results[&c.key()];
        let notes = [
            (
                m.drain_cut,
                "drain runs gave up before every task ran; the rate is of those that did",
            ),
            (
                m.long_not_run,
                "burst or sustained tasks had not run when it gave up (counted as infinitely late)",
            ),
            (
                m.long_inserted_late,
                "burst or sustained tasks were inserted after their due instant",
            ),
            (
                m.not_run,
                "precision tasks had not run when it gave up (counted as infinitely late)",
            ),
            (
                m.throughput_cut,
                "throughput runs gave up before every task ran; the rate is of those that did",
            ),
            (
                m.inserted_late,
                "precision tasks were inserted after their due instant",
            ),
        ];
        for (n, what) in notes {
            if n > 0 {
                println!("note: {}: {n} {what}", c.label());
            }
        }
        for f in &m.failures {
            println!("failed: {}: {f}", c.label());
        }
    }
}

/// A CDF of each contender's lateness, log scale, as SVG.
pub(crate) fn plot(path: &Path, contenders: &[Contender], results: &Results) -> Result<(), String> {
    use plotters::prelude::*;
    let series: Vec<(String, &Vec<f64>)> = contenders
        .iter()
        .filter_map(|c| {
            let m = results.get(&c.key())?;
            (!m.lateness.is_empty()).then(|| (c.label(), &m.lateness))
        })
        .collect();
    if series.is_empty() {
        return Ok(());
    }
    let floor = 0.1f64;
    let top = series
        .iter()
        .filter_map(|(_, l)| l.iter().rev().find(|v| v.is_finite()).copied())
        .fold(10.0f64, f64::max)
        * 1.5;
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Handler start minus scheduled time, 10,000 tasks due 1-10 s ahead (all rounds)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((floor..top).log_scale(), 0f64..1f64)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("lateness, ms (log scale; early or under 0.1 ms drawn at 0.1)")
        .y_desc("fraction of tasks started")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (label, l)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba().stroke_width(2);
        let n = l.len();
        let finite = l.iter().take_while(|v| v.is_finite()).count();
        let step = (n / 1000).max(1);
        let points = (0..finite)
            .step_by(step)
            .chain((finite > 0).then_some(finite - 1))
            .map(|k| (l[k].max(floor), (k + 1) as f64 / n as f64));
        chart
            .draw_series(LineSeries::new(points, color))
            .map_err(|e| e.to_string())?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
