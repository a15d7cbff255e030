//! What the interleaved benches share: the `TTW_INTERLEAVED` switch between
//! criterion and rounds run alternately, and the median they report.

use criterion::Criterion;

/// The median; for an even count, the mean of the two middle values.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// `TTW_INTERLEAVED=<rounds>` runs `interleaved(rounds)`; without it the
/// criterion groups in `benches` run. A bad count is one line and exit 2.
pub fn main(benches: fn(), interleaved: fn(usize)) {
    match std::env::var("TTW_INTERLEAVED").map(|n| n.parse::<usize>()) {
        Ok(Ok(rounds)) if rounds > 0 => interleaved(rounds),
        Ok(_) => {
            eprintln!("TTW_INTERLEAVED wants a number of rounds, at least 1");
            std::process::exit(2);
        }
        Err(_) => {
            benches();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}
