// Whether the kernels that write rows a block at a time should ask for the next block's output
// lines ahead with PREFETCHW (LayerNorm's forward, layernorm_rows.hpp).
//
// The answer differs by core, both ways, and by more than the noise. On an Intel Xeon
// (Emerald Rapids) the forward ran 1.10-1.12x as fast with it at [2048, d], d 256 / 512 /
// 1024, on 1 and 2 threads (2026-11-29): four rows of stores missing L1 at once otherwise wait
// for each line's read for ownership. On an AMD Zen 4 (EPYC, family 25 model 17) the same
// instruction costs more than it hides, even where the lines already sit in L1: rows of d 256
// in L1, L2 and L3 took 6.4-7.3, 5.4-6.9 and 5.8-6.7 TSC cycles a vector with it and 5.1,
// 4.3-4.4 and 5.1-5.2 without (a standalone loop over the kernel, medians of 41). In
// bench_kernels there, without it: 1.04x / 1.04x at [2048, 256] on 1 / 2 threads, 1.06x /
// 1.07x at [2048, 512], 1.07-1.16x with the rows in L2, and 0.97x at [2048, 1024], within
// that point's noise (18-39 GB/s run to run) (medians of 3 runs alternated, 8 at d 1024,
// 2026-11-30). Intel is where it was measured to pay and AMD's Zen 4 where it was measured
// to cost (the Zen 3 and Zen 5 VMs were gone before it existed), so it is asked for on Intel
// cores only.
#pragma once

namespace spw::ops {

// True on Intel CPUs, false elsewhere. Reads CPUID once; safe from any thread.
bool prefetch_outputs_for_write();

}  // namespace spw::ops
