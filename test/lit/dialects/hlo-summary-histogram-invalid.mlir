// hlo.summary_histogram's verifier: one broken rule per case.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'hlo.summary_histogram' op data must have dtype float32, float64, bfloat16, float16, int32, int64, int8, int16, uint8, uint16, uint32, uint64, got bool[2]
func.func @bool_data(%x: tensor<2xi1>, %s: tensor<i64>) {
  hlo.summary_histogram "w" = %x at step %s to "/tmp/logs" buckets 30 : tensor<2xi1>, tensor<i64>
  func.return
}

// -----

// CHECK: 'hlo.summary_histogram' op step must be an int64 or int32 scalar, got float32[]
func.func @float_step(%x: tensor<2xf32>, %s: tensor<f32>) {
  hlo.summary_histogram "w" = %x at step %s to "/tmp/logs" buckets 30 : tensor<2xf32>, tensor<f32>
  func.return
}

// -----

// CHECK: 'hlo.summary_histogram' op buckets must be positive, got 0
func.func @no_buckets(%x: tensor<2xf32>, %s: tensor<i64>) {
  hlo.summary_histogram "w" = %x at step %s to "/tmp/logs" buckets 0 : tensor<2xf32>, tensor<i64>
  func.return
}
