// tpu-batch-replicas{replicas=k}: each device tpu.replicate gets
// @batched_replicas_<i>, its body for a block of k replicas as one program
// on stacked values (the runtime runs a thread's block of replicas so).
// Elementwise ops keep their form on [k, ...] values (an unbatched operand,
// a constant, broadcast once); dimension-carrying ops shift their
// dimensions by one; a dot_general gets the replica axis as its first
// batching dimension; collectives take and give stacked values; fusion
// regions are inlined and formed again on the batched ops (an op without
// a rule: tpu-batch-replicas-invalid.mlir).
// RUN: xtpu-opt %s --split-input-file -p 'tpu-batch-replicas{replicas=4}' | filecheck %s

// CHECK-LABEL: func.func @batched_replicas_0(%xr: tensor<4x2x3xf32>, %wr: tensor<4x3x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %c = hlo.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[CB:.*]] = hlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<4x2x3xf32>
// CHECK-NEXT:    %m = hlo.multiply %xr, %[[CB]] : tensor<4x2x3xf32>
// CHECK-NEXT:    %d = hlo.dot_general %m, %wr, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<4x2x3xf32>, tensor<4x3x4xf32>) -> tensor<4x2x4xf32>
// An all-reduce over one group of all the replicas: every replica's result
// is the same, so its row 0 is taken and what follows runs once per block.
// CHECK-NEXT:    %s = ccl.all_reduce %d applies add groups = dense<0> : tensor<1x1xi64> {tpu.batched_operand} : tensor<4x2x4xf32>
// CHECK-NEXT:    %[[ROW:.*]] = hlo.slice %s, start = [0, 0, 0], limit = [1, 2, 4], strides = [1, 1, 1] : (tensor<4x2x4xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT:    %[[ONE:.*]] = hlo.reshape %[[ROW]] : (tensor<1x2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    func.return %[[ONE]] : tensor<2x4xf32>
func.func @main(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %r = tpu.replicate([%x] as %xr: tensor<2x3xf32>, [%w] as %wr: tensor<3x4xf32>) {n = 1 : i64} {
    %c = hlo.constant dense<2.000000e+00> : tensor<f32>
    %cb = hlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<2x3xf32>
    %m = hlo.multiply %xr, %cb : tensor<2x3xf32>
    %d = hlo.dot_general %m, %wr, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    %s = ccl.all_reduce %d applies add groups = dense<[[0]]> : tensor<1x1xi64> : tensor<2x4xf32>
    tpu.yield %s : tensor<2x4xf32>
  }
  func.return %r : tensor<2x4xf32>
}

// -----

// A dot_general with one side the same for every replica (a constant here,
// a mirrored weight at run time): that side is broadcast (a stride-0 view)
// and the replica axis is a batching dimension of both, so each replica's
// product is its own BLAS call, the unbatched program's, not rows of one
// product of k times the rows (which a BLAS may round differently).
// CHECK-LABEL: func.func @batched_replicas_0(%x: tensor<4x2x3xf32>) -> (tensor<4x2x4xf32>, tensor<4x4x2xf32>)
// CHECK-NEXT:    %w = hlo.constant dense<5.000000e-01> : tensor<4x3xf32>
// CHECK-NEXT:    %[[W4:.*]] = hlo.broadcast_in_dim %w, dims = [1, 2] : (tensor<4x3xf32>) -> tensor<4x4x3xf32>
// CHECK-NEXT:    %d = hlo.dot_general %x, %[[W4]], batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<4x2x3xf32>, tensor<4x4x3xf32>) -> tensor<4x2x4xf32>
// CHECK-NEXT:    %e = hlo.dot_general %[[W4]], %x, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<4x4x3xf32>, tensor<4x2x3xf32>) -> tensor<4x4x2xf32>
// CHECK-NEXT:    func.return %d, %e : tensor<4x2x4xf32>, tensor<4x4x2xf32>
func.func @main(%a: tensor<2x3xf32>) -> (tensor<2x4xf32>, tensor<4x2xf32>) {
  %r, %q = tpu.replicate([%a] as %x: tensor<2x3xf32>) {n = 1 : i64} {
    %w = hlo.constant dense<5.000000e-01> : tensor<4x3xf32>
    %d = hlo.dot_general %x, %w, batching_dims = [] x [], contracting_dims = [1] x [1] : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
    %e = hlo.dot_general %w, %x, batching_dims = [] x [], contracting_dims = [1] x [1] : (tensor<4x3xf32>, tensor<2x3xf32>) -> tensor<4x2xf32>
    tpu.yield %d, %e : tensor<2x4xf32>, tensor<4x2xf32>
  }
  func.return %r, %q : tensor<2x4xf32>, tensor<4x2xf32>
}

// -----

// A fusion region is inlined and formed again on the batched ops; the
// reduce's dimensions, the transpose's permutation and the slice's bounds
// gain the replica axis.
// CHECK-LABEL: func.func @batched_replicas_0(%x: tensor<4x2x3xf32>) -> (tensor<4x2xf32>, tensor<4x3x1xf32>)
// CHECK-NEXT:    %z = hlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %r1 = fusion.region "input"(%x, %z) : (tensor<4x2x3xf32>, tensor<f32>) -> tensor<4x2xf32> {
// CHECK-NEXT:    ^bb0(%x_1: tensor<4x2x3xf32>, %z_1: tensor<f32>):
// CHECK-NEXT:      %e = hlo.exponential %x_1 : tensor<4x2x3xf32>
// CHECK-NEXT:      %r1_1 = hlo.reduce(%e init : %z_1) applies add across dimensions = [2] : (tensor<4x2x3xf32>, tensor<f32>) -> tensor<4x2xf32>
// CHECK-NEXT:      fusion.yield %r1_1 : tensor<4x2xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %t = hlo.transpose %x, dims = [0, 2, 1] : (tensor<4x2x3xf32>) -> tensor<4x3x2xf32>
// CHECK-NEXT:    %sl = hlo.slice %t, start = [0, 0, 1], limit = [4, 3, 2], strides = [1, 1, 1] : (tensor<4x3x2xf32>) -> tensor<4x3x1xf32>
// CHECK-NEXT:    func.return %r1, %sl : tensor<4x2xf32>, tensor<4x3x1xf32>
func.func @main(%a: tensor<2x3xf32>) -> (tensor<2xf32>, tensor<3x1xf32>) {
  %r, %q = tpu.replicate([%a] as %x: tensor<2x3xf32>) {n = 1 : i64} {
    %z = hlo.constant dense<0.000000e+00> : tensor<f32>
    %s = fusion.region "input"(%x, %z) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32> {
    ^bb0(%x1: tensor<2x3xf32>, %z1: tensor<f32>):
      %e = hlo.exponential %x1 : tensor<2x3xf32>
      %r1 = hlo.reduce(%e init : %z1) applies add across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
      fusion.yield %r1 : tensor<2xf32>
    }
    %t = hlo.transpose %x, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %sl = hlo.slice %t, start = [0, 1], limit = [3, 2], strides = [1, 1] : (tensor<3x2xf32>) -> tensor<3x1xf32>
    tpu.yield %s, %sl : tensor<2xf32>, tensor<3x1xf32>
  }
  func.return %r, %q : tensor<2xf32>, tensor<3x1xf32>
}

// -----

// Groups of one replica each: every replica's result differs, so it stays
// stacked (tpu.batched_result); an unbatched operand (a constant) is
// stacked first.
// CHECK-LABEL: func.func @batched_replicas_0(%x: tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
// CHECK-NEXT:    %c = hlo.constant dense<1.000000e+00> : tensor<3xf32>
// CHECK-NEXT:    %[[C4:.*]] = hlo.broadcast_in_dim %c, dims = [1] : (tensor<3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:    %s = ccl.all_reduce %x applies add groups = {{.*}} {tpu.batched_operand, tpu.batched_result} : tensor<4x3xf32>
// CHECK-NEXT:    %t = ccl.all_reduce %[[C4]] applies add groups = {{.*}} {tpu.batched_operand, tpu.batched_result} : tensor<4x3xf32>
// CHECK-NEXT:    func.return %s, %t : tensor<4x3xf32>, tensor<4x3xf32>
func.func @main(%a: tensor<3xf32>, %b: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
  %r:4 = tpu.replicate([%a, %b] as %x: tensor<3xf32>) {n = 2 : i64} {
    %c = hlo.constant dense<1.000000e+00> : tensor<3xf32>
    %s = ccl.all_reduce %x applies add groups = dense<[[0], [1]]> : tensor<2x1xi64> : tensor<3xf32>
    %t = ccl.all_reduce %c applies add groups = dense<[[0], [1]]> : tensor<2x1xi64> : tensor<3xf32>
    tpu.yield %s, %t : tensor<3xf32>, tensor<3xf32>
  }
  func.return %r#0, %r#1, %r#2, %r#3 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}
