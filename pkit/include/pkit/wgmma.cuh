// Hopper warpgroup MMA (sm_90a): 128 threads multiply tiles held in shared memory, asynchronously.
// Operands are K-major tiles whose 128-byte rows TMA wrote with the 128-byte swizzle (64 bf16 or 128 e4m3 per
// row, 8-row groups 1024 bytes apart); `smem_desc` describes one to the tensor cores. The accumulator of an
// m64nN product is N / 2 fp32 registers per thread: thread t of the warpgroup holds, for column group
// i = 0..N/8-1, rows 16 * (t / 32) + (t % 32) / 4 (+ 8) and columns 8i + 2 (t % 4) (+ 1), as d[4i .. 4i + 3].
#pragma once
#include "common.cuh"

namespace pkit {

// The input types of a wgmma, by the elements one 128-byte row of a K slice holds: bf16 (one step multiplies 16
// of K) and FP8 e4m3 (32 of K). Either way a step reads 32 bytes of each row.
struct Bf16 {
  static constexpr int kRowElements = 64;
};
struct E4m3 {
  static constexpr int kRowElements = 128;
};

// Descriptor of a K-major, 128-byte-swizzled tile starting at `tile` (1024-byte aligned; advance by k * 32
// bytes, i.e. + 2k, to start at the k-th 32-byte step within the 128-byte swizzle span).
__device__ __forceinline__ u64 smem_desc(const void* tile) {
  const u64 address = static_cast<u32>(__cvta_generic_to_shared(tile));
  return ((address & 0x3FFFF) >> 4)  // start address, 16-byte units
         | (u64(1) << 16)            // leading byte offset: unused with this swizzle
         | (u64(1024 >> 4) << 32)    // stride byte offset: 8 rows of 128 bytes
         | (u64(1) << 62);           // 128-byte swizzle
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

// Hand registers between the warpgroups of a block (sm_90a; every thread of the warpgroup executes it): a
// producer that only issues TMA lowers its limit to N per thread, consumers holding wgmma accumulators raise
// theirs to N. The block's total must stay within what it was launched with.
template <int N>
__device__ __forceinline__ void registers_lower_to() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void registers_raise_to() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// Wait until at most N committed wgmma groups of this warpgroup are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// The accumulator operands of a wgmma (d[0..31], d[0..63] or d[0..127]) and their places in its instruction.
#define PKIT_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                   "+f"(d[i + 6]), "+f"(d[i + 7])
#define PKIT_D32 PKIT_D8(0), PKIT_D8(8), PKIT_D8(16), PKIT_D8(24)
#define PKIT_D64 PKIT_D8(0), PKIT_D8(8), PKIT_D8(16), PKIT_D8(24), PKIT_D8(32), PKIT_D8(40), PKIT_D8(48), PKIT_D8(56)
#define PKIT_D128 PKIT_D64, PKIT_D8(64), PKIT_D8(72), PKIT_D8(80), PKIT_D8(88), PKIT_D8(96), PKIT_D8(104), \
                  PKIT_D8(112), PKIT_D8(120)
#define PKIT_R32 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define PKIT_R64 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PKIT_R128 PKIT_R64 ", " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// One step of d (64 x N, fp32) = a (64 rows) * b (N rows)^T over 32 bytes of K (+ d when `accumulate`), both
// K-major in shared memory; N is 64, 128 or 256, T is Bf16 or E4m3 (FP8 steps take no transpose flags).
template <int N, class T>
__device__ void mma(float (&d)[N / 2], u64 a_desc, u64 b_desc, bool accumulate);

template <>
__device__ __forceinline__ void mma<256, Bf16>(float (&d)[128], u64 a_desc, u64 b_desc, bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" PKIT_R128 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
               : PKIT_D128 : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)));
}

template <>
__device__ __forceinline__ void mma<128, Bf16>(float (&d)[64], u64 a_desc, u64 b_desc, bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" PKIT_R64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : PKIT_D64 : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)));
}

template <>
__device__ __forceinline__ void mma<64, Bf16>(float (&d)[32], u64 a_desc, u64 b_desc, bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" PKIT_R32 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : PKIT_D32 : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)));
}

template <>
__device__ __forceinline__ void mma<256, E4m3>(float (&d)[128], u64 a_desc, u64 b_desc, bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {" PKIT_R128 "}, %128, %129, p, 1, 1;\n}\n"
               : PKIT_D128 : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)));
}

template <>
__device__ __forceinline__ void mma<128, E4m3>(float (&d)[64], u64 a_desc, u64 b_desc, bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" PKIT_R64 "}, %64, %65, p, 1, 1;\n}\n"
               : PKIT_D64 : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)));
}

template <>
__device__ __forceinline__ void mma<64, E4m3>(float (&d)[32], u64 a_desc, u64 b_desc, bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" PKIT_R32 "}, %32, %33, p, 1, 1;\n}\n"
               : PKIT_D32 : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)));
}

#undef PKIT_D8
#undef PKIT_D32
#undef PKIT_D64
#undef PKIT_D128
#undef PKIT_R32
#undef PKIT_R64
#undef PKIT_R128

}  // namespace pkit
