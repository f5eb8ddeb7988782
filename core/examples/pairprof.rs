use fireopal_core::buddy::BuddyAllocator;
use std::hint::black_box;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let size: u64 = args[1].parse().unwrap();
    let n: u64 = args[2].parse().unwrap();
    let mut h = BuddyAllocator::new(64 << 20).unwrap();
    let a = h.alloc(size, 8).unwrap();
    h.free(a).unwrap();
    let t = std::time::Instant::now();
    for _ in 0..n {
        let at = h.alloc(black_box(size), 8).unwrap();
        h.free(black_box(at)).unwrap();
    }
    println!("{:.2} ns/pair", t.elapsed().as_nanos() as f64 / n as f64);
}
