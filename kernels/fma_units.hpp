// How many 512-bit FMA instructions the core starts per cycle, measured.
//
// Intel cores with AVX-512 have one or two 512-bit FMA units (Xeon Silver and Bronze of the
// Skylake and Cascade Lake years have one; Gold, Platinum and the later ones two). With one,
// AVX-512 code computes no faster than AVX2, and BLIS's haswell kernels are the right choice;
// with two, its skx kernels are twice as fast. BLIS 0.9 reads the count from the model name
// ("Xeon(R) Gold 6148") and takes haswell when the name has no such word, as in the
// "Intel(R) Xeon(R) Processor" of many virtual machines: on an Emerald Rapids VM, sgemm ran
// at 86 GFLOP/s a core with haswell against 157 with skx (2026-11-29). Measuring settles it
// whatever the name says.
#pragma once

namespace spw::blas {

// 2 when 512-bit FMAs issue at the rate of 256-bit ones (two units), 1 when at about half of
// it (one unit), 0 when the CPU or the OS cannot run AVX-512 F. About a millisecond on the
// calling thread: call it once, before worker threads run.
int measure_fma512_units();

}  // namespace spw::blas
