//! The `tailgate` command: run the gateway, validate a config, or print the effective one.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// jemalloc rather than the system allocator: the sampler holds many small, growing,
/// short-lived buffers (one arena per trace) that are allocated on the receivers' threads
/// and freed on the decision task's. With glibc malloc, under load, freed memory was
/// returned to the OS and faulted back in (a large share of kernel time) and RSS per
/// buffered span was ~2.4× its encoded size; see BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before the first allocation (`malloc_conf`, see jemalloc(3)).
/// `_RJEM_MALLOC_CONF` in the environment is read after them, so an operator can still
/// override each one.
///
/// - `narenas:1`: one arena for every thread. A held trace's arena is allocated on the
///   receiving worker's thread and freed on the deciding one's, and jemalloc returns a
///   freed block to the arena it came from; with an arena per thread (jemalloc's default
///   is four per CPU), each arena kept dirty pages up to its own peak, and the process
///   held the sum of the peaks rather than the peak of the sum: 15 MB more RSS for
///   300,000 held spans, and no CPU saved by the extra arenas (BENCHMARKS.md,
///   "Performance pass 2, fourth stop"). The thread caches still serve most
///   allocations without the arena's lock.
/// - `background_thread:true`: freed pages are returned to the OS by jemalloc's own
///   thread as they age (`dirty_decay_ms`, 10 s). Without it, pages age only when the
///   process allocates, so a gateway gone quiet after a burst kept the burst's RSS for
///   as long as it stayed quiet (190 MB after a 15 s flat-out load; with the thread,
///   nearly 70 MB of it went back within 4 s): a pod that looked as full as at its
///   peak, to its memory limit and to the limiter's next reading.
///
/// jemalloc declares `malloc_conf` weak and reads it as a NUL-terminated C string; this
/// definition is a pointer to the first byte of one that lives for the whole process.
#[allow(unsafe_code, non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
static malloc_conf: &u8 = &ALLOCATOR_OPTIONS[0];

/// The options string of [`malloc_conf`], NUL-terminated.
const ALLOCATOR_OPTIONS: &[u8] = b"narenas:1,background_thread:true\0";

/// Returns the pages jemalloc keeps after they were freed (for up to its decay time, 10 s
/// by default) to the OS. The memory limiter reads the process RSS, which counts those
/// pages; it calls this when memory use passes the soft limit, as the Collector's limiter
/// forces a garbage collection. Cheap enough to call once per check while there.
#[allow(unsafe_code)]
fn release_freed_memory() {
    // `MALLCTL_ARENAS_ALL` (4096) addresses every arena.
    const PURGE_ALL_ARENAS: &[u8] = b"arena.4096.purge\0";
    // SAFETY: `arena.<i>.purge` is a command that reads and writes no value, so every
    // pointer is null and the lengths are zero, as mallctl(3) requires; the name is a
    // NUL-terminated static string.
    let _status = unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL_ARENAS.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
}

/// jemalloc's statistics for the process metrics (`otelcol_process_runtime_*` and
/// `tailgate_allocator_dirty_bytes`): allocated, resident and dirty bytes, refreshed at
/// each call. `None` if jemalloc cannot report them. jemalloc keeps its counters per
/// thread cache and arena and merges them only when asked (`epoch`), which takes its
/// locks briefly: cheap at a scrape's pace, and the statistics cost no measurable CPU on
/// the hot path (BENCHMARKS.md, "Performance pass 2, fifth stop").
#[allow(unsafe_code)]
fn read_allocator_stats() -> Option<tailgate::telemetry::AllocatorStats> {
    let mut epoch: u64 = 1;
    // SAFETY: writing `epoch` (a `uint64_t`, mallctl(3)) refreshes the statistics; the
    // new value is a `u64` of the given length, nothing is read back.
    let status = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"epoch".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&raw mut epoch).cast(),
            std::mem::size_of::<u64>(),
        )
    };
    if status != 0 {
        return None;
    }
    let page = allocator_size(c"arenas.page")?;
    Some(tailgate::telemetry::AllocatorStats {
        allocated: allocator_size(c"stats.allocated")?,
        resident: allocator_size(c"stats.resident")?,
        // `MALLCTL_ARENAS_ALL` (4096): the dirty pages of every arena.
        dirty: allocator_size(c"stats.arenas.4096.pdirty")?.saturating_mul(page),
    })
}

/// A `size_t` that jemalloc reports through mallctl(3); `None` if it does not.
fn allocator_size(name: &std::ffi::CStr) -> Option<u64> {
    allocator_value::<usize>(name).map(|value| value as u64)
}

/// A statistic, option or setting that jemalloc reports through mallctl(3), of type `T`
/// (the type mallctl(3) documents for `name`); `None` if jemalloc does not report it or
/// `T` is not of its size.
#[allow(unsafe_code)]
fn allocator_value<T: Default>(name: &std::ffi::CStr) -> Option<T> {
    let mut value = T::default();
    let mut len = std::mem::size_of::<T>();
    // SAFETY: mallctl writes at most `len` bytes to `value`, a `T` of `len` bytes, and
    // fails when `len` is not the size of `name`'s value; no new value is written.
    let status = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            (&raw mut value).cast(),
            &raw mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    (status == 0).then_some(value)
}

/// A tail-sampling OTLP gateway, configured in the OpenTelemetry Collector's YAML.
#[derive(Debug, Parser)]
#[command(name = "tailgate", version)]
struct Args {
    /// A config file; repeat to merge several (later files override earlier ones).
    /// Without one, the built-in default config runs.
    #[arg(long = "config", short = 'c', global = true, value_name = "FILE")]
    config: Vec<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway (the default).
    Run,
    /// Check the config and exit: 0 when valid, 1 with every error listed otherwise.
    Validate,
    /// Print the effective config, with every default filled in.
    PrintConfig,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = if args.config.is_empty() {
        tailgate::config::load_str(&[tailgate::config::DEFAULT_CONFIG])
    } else {
        tailgate::config::load(&args.config)
    };
    let config = match config {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("invalid configuration:\n{errors}");
            return ExitCode::from(1);
        }
    };
    match args.command.unwrap_or(Command::Run) {
        Command::Validate => {
            eprintln!("configuration is valid");
            ExitCode::SUCCESS
        }
        Command::PrintConfig => {
            #[allow(clippy::print_stdout)]
            {
                print!("{}", tailgate::config::render(&config));
            }
            ExitCode::SUCCESS
        }
        Command::Run => run(config),
    }
}

fn run(config: tailgate::config::Config) -> ExitCode {
    tailgate::telemetry::init_logging(&config.service.telemetry);
    tailgate::limiter::set_memory_release(release_freed_memory);
    tailgate::telemetry::set_allocator_stats(read_allocator_stats);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("starting the runtime: {error}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let gateway = match tailgate::service::Gateway::start(config).await {
            Ok(gateway) => gateway,
            Err(error) => {
                tracing::error!(event = "gateway.start_failed", error = %error);
                return ExitCode::from(1);
            }
        };
        match tailgate::shutdown::wait_for_signal().await {
            Ok(signal) => tracing::info!(event = "gateway.signal_received", signal),
            Err(error) => {
                tracing::error!(event = "gateway.signal_handler_failed", error = %error);
            }
        }
        let report = gateway.shutdown().await;
        if report.dropped_spans > 0 || report.dropped_metric_points > 0 {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    })
}

#[cfg(test)]
mod tests {
    /// Reads an allocator option or setting of type `T` (as mallctl(3) documents it).
    fn allocator_option<T: Default>(name: &str) -> T {
        let name = std::ffi::CString::new(name).expect("no NUL in the name");
        super::allocator_value(&name).unwrap_or_else(|| panic!("mallctl({name:?})"))
    }

    /// Scenario: the gateway's allocator, as linked into this binary.
    /// Guarantees: the options it ships with are the ones in effect (a misspelt symbol
    /// or option would silently leave jemalloc's defaults).
    #[test]
    fn ships_with_its_allocator_options() {
        // `arenas.narenas` also counts the arena jemalloc keeps apart for allocations
        // above `oversize_threshold` (8 MiB): the option is what the threads share.
        assert_eq!(allocator_option::<u32>("opt.narenas"), 1);
        assert!(allocator_option::<bool>("opt.background_thread"));
        assert!(allocator_option::<bool>("background_thread"));
    }

    /// Scenario: the allocator's statistics are read, 64 MiB are allocated and written,
    /// and they are read again.
    /// Guarantees: this build reports them (the process metrics need them); the
    /// allocated bytes grow by the block; resident bytes cover the allocated ones; the
    /// dirty pages are part of the resident ones.
    #[test]
    fn reports_the_allocators_statistics() {
        const BLOCK: usize = 64 << 20;
        let before = super::read_allocator_stats().expect("statistics built in");
        let block = std::hint::black_box(vec![1u8; BLOCK]);
        let during = super::read_allocator_stats().expect("statistics built in");
        drop(block);
        // The other test of this binary allocates a few bytes at most meanwhile.
        assert!(
            during.allocated >= before.allocated + BLOCK as u64 - (1 << 20),
            "{before:?} then {during:?}"
        );
        assert!(during.resident >= during.allocated, "{during:?}");
        assert!(during.dirty <= during.resident, "{during:?}");
    }
}
