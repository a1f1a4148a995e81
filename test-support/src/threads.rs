//! The threads of the whole test process, as the kernel lists them: for the tests that count
//! what the library starts (each alone in a binary of its own).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The threads of this process.
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task lists the process's threads")
        .count()
}

/// The names of this process's threads, counted by name, for failure messages.
pub fn thread_names() -> String {
    let mut names = BTreeMap::<String, usize>::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        *names.entry(name.trim().to_owned()).or_default() += 1;
    }
    format!("{names:?}")
}

/// The most threads this process had while it ran, sampled every millisecond by a thread of
/// its own (counted in every sample), with the names seen at that peak.
pub struct PeakThreads {
    peak: Arc<(AtomicUsize, parking_lot::Mutex<String>)>,
    stop: Arc<AtomicBool>,
    sampler: Option<JoinHandle<()>>,
}

impl PeakThreads {
    /// Starts sampling.
    pub fn start() -> Self {
        let peak = Arc::new((AtomicUsize::new(0), parking_lot::Mutex::new(String::new())));
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let now = threads();
                    if now > peak.0.fetch_max(now, Ordering::AcqRel) {
                        *peak.1.lock() = thread_names();
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        // Counted from its first sample on.
        while peak.0.load(Ordering::Acquire) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        PeakThreads {
            peak,
            stop,
            sampler: Some(sampler),
        }
    }

    /// The peak so far, and the threads' names then.
    pub fn peak(&self) -> (usize, String) {
        (
            self.peak.0.load(Ordering::Acquire),
            self.peak.1.lock().clone(),
        )
    }

    /// Starts the count again from the threads there are now.
    pub fn reset(&self) {
        self.peak.0.store(threads(), Ordering::Release);
        *self.peak.1.lock() = thread_names();
    }
}

impl Drop for PeakThreads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(sampler) = self.sampler.take() {
            let _ = sampler.join();
        }
    }
}
