#[allow(dead_code)]
mod encode { pub use tracemill_datasets::encode::*; }
#[allow(dead_code)]
mod bundle { pub use tracemill_datasets::bundle::*; }
#[allow(dead_code)]
#[path = "../../fuzz/src/targets.rs"]
mod targets;

#[test]
fn show() {
    let p = std::env::var("FUZZ_INPUT").unwrap();
    let data = std::fs::read(&p).unwrap();
    let case = targets::Case::parse(&data).unwrap();
    let chunk: u64 = std::env::var("CHUNK").ok().map(|c| c.parse().unwrap()).unwrap_or(u64::MAX);
    let d = case.decode(chunk);
    let n: usize = std::env::var("N").ok().map(|c| c.parse().unwrap()).unwrap_or(20);
    for e in d.events.iter().take(n) { println!("EV {:?}", e); }
    for i in 0..d.rows.len().min(n) { println!("ROW {:?}", d.rows.row(i)); }
    for i in 0..d.timing_rows.len().min(n) { println!("TIM {:?}", d.timing_rows.row(i)); }
    targets::check_contracts(&d, case.trace.len() as u64, &targets::OPEN_FINDINGS);
}

#[test]
fn diff() {
    let p = std::env::var("FUZZ_INPUT").unwrap();
    let data = std::fs::read(&p).unwrap();
    let case = targets::Case::parse(&data).unwrap();
    let chunk: u64 = std::env::var("CHUNK").ok().map(|c| c.parse().unwrap()).unwrap_or(1);
    let a = case.decode(u64::MAX);
    let b = case.decode(chunk);
    let s = tracemill_decode::stream::TraceStream::linear(&case.trace);
    println!("PSBS {:?} len {} fallbacks seq {} par {}", tracemill_decode::sync::find_psbs(&s), case.trace.len(), a.fallbacks, b.fallbacks);
    println!("rows {} vs {}", a.rows.len(), b.rows.len());
    let n = a.rows.len().max(b.rows.len());
    let mut shown = 0;
    for i in 0..n {
        let x = (i < a.rows.len()).then(|| a.rows.row(i));
        let y = (i < b.rows.len()).then(|| b.rows.row(i));
        if x != y && shown < 6 { println!("{i}: SEQ {:?}\n{i}: PAR {:?}", x, y); shown += 1; }
    }
    for e in &a.events { println!("SEQEV {:?}", e); }
    for e in &b.events { println!("PAREV {:?}", e); }
}
