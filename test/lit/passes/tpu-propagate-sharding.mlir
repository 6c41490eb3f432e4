// tpu-propagate-sharding: XLA's GSPMD sharding propagation. From the
// tpu.sharding_constraint ops, every op result of a device tpu.replicate with
// several logical cores gets tpu.sharding = [one #tpu.sharding per result], the
// replicate gets tpu.input_shardings / tpu.output_shardings. Forward (operand
// -> result) and backward (result -> operand) through each op kind; conflicts:
// constraints are fixed, a value only takes a more specific sharding (more
// tiles; compatible partial shardings merge), ties go to the first candidate
// (forward before backward, earlier operand / user first); every sharding is
// legal for its value (even splits), else {replicated}.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics -p tpu-propagate-sharding | filecheck %s

// Elementwise, forward: the constraint's tiling reaches every elementwise op,
// and (backward) the add's other operand, so the body argument is split too.
// CHECK-LABEL: func @elementwise_forward
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[2,1]<=[2]}>, #tpu.sharding<{devices=[2,1]<=[2]}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,1]<=[2]}>]
// CHECK:         %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1]<=[2]}> {tpu.sharding = [#tpu.sharding<{devices=[2,1]<=[2]}>]}
// CHECK-NEXT:    %s = hlo.add %xs, %y {tpu.sharding = [#tpu.sharding<{devices=[2,1]<=[2]}>]}
// CHECK-NEXT:    %n = hlo.negate %s {tpu.sharding = [#tpu.sharding<{devices=[2,1]<=[2]}>]}
// CHECK-NEXT:    %c = hlo.compare GT, %n, %s {tpu.sharding = [#tpu.sharding<{devices=[2,1]<=[2]}>]}
// CHECK-NEXT:    %f = hlo.convert %c {tpu.sharding = [#tpu.sharding<{devices=[2,1]<=[2]}>]}
func.func @elementwise_forward(%a: tensor<8x4xf32>, %b: tensor<8x4xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x4xf32>, [%b] as %y: tensor<8x4xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1]<=[2]}> : tensor<8x4xf32>
    %s = hlo.add %xs, %y : tensor<8x4xf32>
    %n = hlo.negate %s : tensor<8x4xf32>
    %c = hlo.compare GT, %n, %s : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xi1>
    %f = hlo.convert %c : (tensor<8x4xi1>) -> tensor<8x4xf32>
    tpu.yield %f : tensor<8x4xf32>
  }
  func.return
}

// -----

// Elementwise, backward: a constraint on the last value splits everything
// before it, up to the body arguments.
// CHECK-LABEL: func @elementwise_backward
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[1,2]<=[2]}>, #tpu.sharding<{devices=[1,2]<=[2]}>]
// CHECK:         %m = hlo.multiply %x, %y {tpu.sharding = [#tpu.sharding<{devices=[1,2]<=[2]}>]}
// CHECK-NEXT:    %e = hlo.exponential %m {tpu.sharding = [#tpu.sharding<{devices=[1,2]<=[2]}>]}
func.func @elementwise_backward(%a: tensor<8x4xf32>, %b: tensor<8x4xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x4xf32>, [%b] as %y: tensor<8x4xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %m = hlo.multiply %x, %y : tensor<8x4xf32>
    %e = hlo.exponential %m : tensor<8x4xf32>
    %es = tpu.sharding_constraint %e to #tpu.sharding<{devices=[1,2]<=[2]}> : tensor<8x4xf32>
    tpu.yield %es : tensor<8x4xf32>
  }
  func.return
}

// -----

// A scalar predicate of select stays replicated; the constant takes the
// tiling its user asks for.
// CHECK-LABEL: func @select_scalar_predicate
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[2]<=[2]}>, #tpu.sharding<{replicated}>]
// CHECK:         %z = hlo.constant {tpu.sharding = [#tpu.sharding<{devices=[2]<=[2]}>]}
// CHECK-NEXT:    %s = hlo.select %q, %xs, %z {tpu.sharding = [#tpu.sharding<{devices=[2]<=[2]}>]}
func.func @select_scalar_predicate(%a: tensor<8xf32>, %p: tensor<i1>) {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>, [%p] as %q: tensor<i1>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2]<=[2]}> : tensor<8xf32>
    %z = hlo.constant dense<0.0> : tensor<8xf32>
    %s = hlo.select %q, %xs, %z : (tensor<i1>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    tpu.yield %s : tensor<8xf32>
  }
  func.return
}

// -----

// broadcast_in_dim, forward: operand dimension 0 is result dimension 1; the
// new dimension is not tiled.
// CHECK-LABEL: func @broadcast_forward
// CHECK:         %b = hlo.broadcast_in_dim %xs, dims = [1] {tpu.sharding = [#tpu.sharding<{devices=[1,2]<=[2]}>]}
func.func @broadcast_forward(%a: tensor<4xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<4xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2]<=[2]}> : tensor<4xf32>
    %b = hlo.broadcast_in_dim %xs, dims = [1] : (tensor<4xf32>) -> tensor<6x4xf32>
    tpu.yield %b : tensor<6x4xf32>
  }
  func.return
}

// -----

// broadcast_in_dim, backward: tiles of a new dimension, and of a dimension
// that broadcasts from size 1, become replication of the operand; device 2i+j
// holds result tile (i, j), so operand tile j is held by {j, j+2}.
// CHECK-LABEL: func @broadcast_backward
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[2,2]0,2,1,3 last_tile_dim_replicate}>, #tpu.sharding<{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}>]
// CHECK:         %b = hlo.broadcast_in_dim %x, dims = [1] {tpu.sharding = [#tpu.sharding<{devices=[2,2]<=[4]}>]}
// CHECK:         %d = hlo.broadcast_in_dim %y, dims = [0, 1] {tpu.sharding = [#tpu.sharding<{devices=[2,2]<=[4]}>]}
func.func @broadcast_backward(%a: tensor<4xf32>, %c: tensor<1x4xf32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<4xf32>, [%c] as %y: tensor<1x4xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %b = hlo.broadcast_in_dim %x, dims = [1] : (tensor<4xf32>) -> tensor<8x4xf32>
    %bs = tpu.sharding_constraint %b to #tpu.sharding<{devices=[2,2]<=[4]}> : tensor<8x4xf32>
    %d = hlo.broadcast_in_dim %y, dims = [0, 1] : (tensor<1x4xf32>) -> tensor<8x4xf32>
    %ds = tpu.sharding_constraint %d to #tpu.sharding<{devices=[2,2]<=[4]}> : tensor<8x4xf32>
    tpu.yield %bs, %ds : tensor<8x4xf32>, tensor<8x4xf32>
  }
  func.return
}

// -----

// reshape keeps a split that is the same block of elements on both sides:
// the leading dimension of a split (8 -> 2x4, 2 tiles divide 2) and a merge
// led by the split dimension (8x6 -> 48).
// CHECK-LABEL: func @reshape_keeps_split
// CHECK:         %split = hlo.reshape %xs {tpu.sharding = [#tpu.sharding<{devices=[2,1,1]<=[2]}>]}
// CHECK-NEXT:    %merged = hlo.reshape %xs {tpu.sharding = [#tpu.sharding<{devices=[2]<=[2]}>]}
func.func @reshape_keeps_split(%a: tensor<8x6xf32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<8x6xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1]<=[2]}> : tensor<8x6xf32>
    %split = hlo.reshape %xs : (tensor<8x6xf32>) -> tensor<2x4x6xf32>
    %merged = hlo.reshape %xs : (tensor<8x6xf32>) -> tensor<48xf32>
    tpu.yield %split, %merged : tensor<2x4x6xf32>, tensor<48xf32>
  }
  func.return
}

// -----

// reshape replicates a split it cannot keep: an inner dimension merged away
// (8x8 -> 64 split on dim 1).  A leading dimension the tile count does not
// divide spreads the tiles over two dimensions (GSPMD's ReshapeSharding:
// 8 in 4 tiles -> 2x4 tiled [2,2], the same 4 contiguous chunks); 8 -> 4x2
// keeps it on the leading one.
// CHECK-LABEL: func @reshape_drops_split
// CHECK:         %inner = hlo.reshape %xs {tpu.sharding = [#tpu.sharding<{replicated}>]}
// CHECK:         %small = hlo.reshape %ys {tpu.sharding = [#tpu.sharding<{devices=[2,2]<=[4]}>]}
// CHECK-NEXT:    %big = hlo.reshape %ys {tpu.sharding = [#tpu.sharding<{devices=[4,1]<=[4]}>]}
func.func @reshape_drops_split(%a: tensor<8x8xf32>, %b: tensor<8xf32>) {
  %r:3 = tpu.replicate([%a] as %x: tensor<8x8xf32>, [%b] as %y: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,4]<=[4]}> : tensor<8x8xf32>
    %inner = hlo.reshape %xs : (tensor<8x8xf32>) -> tensor<64xf32>
    %ys = tpu.sharding_constraint %y to #tpu.sharding<{devices=[4]<=[4]}> : tensor<8xf32>
    %small = hlo.reshape %ys : (tensor<8xf32>) -> tensor<2x4xf32>
    %big = hlo.reshape %ys : (tensor<8xf32>) -> tensor<4x2xf32>
    tpu.yield %inner, %small, %big : tensor<64xf32>, tensor<2x4xf32>, tensor<4x2xf32>
  }
  func.return
}

// -----

// reshape, backward (size-1 dimensions aside).
// CHECK-LABEL: func @reshape_backward
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[2]<=[2]}>]
// CHECK:         %y = hlo.reshape %x {tpu.sharding = [#tpu.sharding<{devices=[1,2,1]<=[2]}>]}
func.func @reshape_backward(%a: tensor<48xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<48xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %y = hlo.reshape %x : (tensor<48xf32>) -> tensor<1x8x6xf32>
    %ys = tpu.sharding_constraint %y to #tpu.sharding<{devices=[1,2,1]<=[2]}> : tensor<1x8x6xf32>
    tpu.yield %ys : tensor<1x8x6xf32>
  }
  func.return
}

// -----

// transpose permutes the tile grid, devices included (tile (i, j) on device
// 2i+j becomes tile (j, i)); backward too.
// CHECK-LABEL: func @transpose_permutes_tiles
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[2,2]<=[4]}>, #tpu.sharding<{devices=[1,4]<=[4]}>]
// CHECK:         %t = hlo.transpose %xs, dims = [1, 0] {tpu.sharding = [#tpu.sharding<{devices=[2,2]0,2,1,3}>]}
// CHECK-NEXT:    %u = hlo.transpose %y, dims = [1, 0] {tpu.sharding = [#tpu.sharding<{devices=[4,1]<=[4]}>]}
func.func @transpose_permutes_tiles(%a: tensor<4x6xf32>, %b: tensor<6x4xf32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<4x6xf32>, [%b] as %y: tensor<6x4xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,2]<=[4]}> : tensor<4x6xf32>
    %t = hlo.transpose %xs, dims = [1, 0] : (tensor<4x6xf32>) -> tensor<6x4xf32>
    %u = hlo.transpose %y, dims = [1, 0] : (tensor<6x4xf32>) -> tensor<4x6xf32>
    %us = tpu.sharding_constraint %u to #tpu.sharding<{devices=[4,1]<=[4]}> : tensor<4x6xf32>
    tpu.yield %t, %us : tensor<6x4xf32>, tensor<4x6xf32>
  }
  func.return
}

// -----

// dot_general, batch dimensions: the result and the other operand take the
// batch split.
// CHECK-LABEL: func @dot_batch_dims
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[2,1,1]<=[2]}>, #tpu.sharding<{devices=[2,1,1]<=[2]}>]
// CHECK:         %d = hlo.dot_general {{.*}} {tpu.sharding = [#tpu.sharding<{devices=[2,1,1]<=[2]}>]}
func.func @dot_batch_dims(%a: tensor<4x8x16xf32>, %b: tensor<4x16x2xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<4x8x16xf32>, [%b] as %w: tensor<4x16x2xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1,1]<=[2]}> : tensor<4x8x16xf32>
    %d = hlo.dot_general %xs, %w, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<4x8x16xf32>, tensor<4x16x2xf32>) -> tensor<4x8x2xf32>
    tpu.yield %d : tensor<4x8x2xf32>
  }
  func.return
}

// -----

// dot_general, free dimensions: lhs rows over {0,1},{2,3} and rhs columns
// over {0,2},{1,3} merge into a 2x2 tiling of the result.
// CHECK-LABEL: func @dot_free_dims_merge
// CHECK:         %d = hlo.dot_general {{.*}} {tpu.sharding = [#tpu.sharding<{devices=[2,2]<=[4]}>]}
func.func @dot_free_dims_merge(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x16xf32>, [%b] as %w: tensor<16x4xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1,2]<=[4] last_tile_dim_replicate}> : tensor<8x16xf32>
    %ws = tpu.sharding_constraint %w to #tpu.sharding<{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}> : tensor<16x4xf32>
    %d = hlo.dot_general %xs, %ws, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    tpu.yield %d : tensor<8x4xf32>
  }
  func.return
}

// -----

// dot_general, contracting dimension split: the rhs takes the lhs's split of
// k (so both hold matching halves) and the result is {replicated}, XLA's
// choice: each device holds a partial sum that the partitioner all-reduces.
// CHECK-LABEL: func @dot_contracting_dim
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[1,2]<=[2]}>, #tpu.sharding<{devices=[2,1]<=[2]}>], tpu.output_shardings = [#tpu.sharding<{replicated}>]
// CHECK:         %d = hlo.dot_general {{.*}} {tpu.sharding = [#tpu.sharding<{replicated}>]}
func.func @dot_contracting_dim(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x16xf32>, [%b] as %w: tensor<16x4xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,2]<=[2]}> : tensor<8x16xf32>
    %d = hlo.dot_general %xs, %w, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    tpu.yield %d : tensor<8x4xf32>
  }
  func.return
}

// -----

// dot_general, rows and contracting dimension split: the result keeps the row
// split, replicated over the k split (partial replication).
// CHECK-LABEL: func @dot_contracting_and_free
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[2,2]<=[4]}>, #tpu.sharding<{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}>]
// CHECK:         %d = hlo.dot_general {{.*}} {tpu.sharding = [#tpu.sharding<{devices=[2,1,2]<=[4] last_tile_dim_replicate}>]}
func.func @dot_contracting_and_free(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x16xf32>, [%b] as %w: tensor<16x4xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,2]<=[4]}> : tensor<8x16xf32>
    %d = hlo.dot_general %xs, %w, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    tpu.yield %d : tensor<8x4xf32>
  }
  func.return
}

// -----

// reduce over the split dimension: {replicated}; over another dimension: the
// split stays; over one of two split dimensions: partial replication.
// CHECK-LABEL: func @reduce_split_and_unsplit
// CHECK:         %over_split = hlo.reduce{{.*}} {tpu.sharding = [#tpu.sharding<{replicated}>]}
// CHECK-NEXT:    %over_other = hlo.reduce{{.*}} {tpu.sharding = [#tpu.sharding<{devices=[4]<=[4]}>]}
// CHECK:         %partial = hlo.reduce{{.*}} {tpu.sharding = [#tpu.sharding<{devices=[2,2]<=[4] last_tile_dim_replicate}>]}
func.func @reduce_split_and_unsplit(%a: tensor<8x6xf32>, %b: tensor<8x6xf32>) {
  %r:3 = tpu.replicate([%a] as %x: tensor<8x6xf32>, [%b] as %y: tensor<8x6xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %z = hlo.constant dense<0.0> : tensor<f32>
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[4,1]<=[4]}> : tensor<8x6xf32>
    %over_split = hlo.reduce(%xs init : %z) applies add across dimensions = [0] : (tensor<8x6xf32>, tensor<f32>) -> tensor<6xf32>
    %over_other = hlo.reduce(%xs init : %z) applies max across dimensions = [1] : (tensor<8x6xf32>, tensor<f32>) -> tensor<8xf32>
    %ys = tpu.sharding_constraint %y to #tpu.sharding<{devices=[2,2]<=[4]}> : tensor<8x6xf32>
    %partial = hlo.reduce(%ys init : %z) applies add across dimensions = [1] : (tensor<8x6xf32>, tensor<f32>) -> tensor<8xf32>
    tpu.yield %over_split, %over_other, %partial : tensor<6xf32>, tensor<8xf32>, tensor<8xf32>
  }
  func.return
}

// -----

// reduce, backward: the kept dimensions take the result's tiles; the scalar
// init value stays replicated.
// CHECK-LABEL: func @reduce_backward
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[1,2]<=[2]}>]
// CHECK:         %z = hlo.constant {tpu.sharding = [#tpu.sharding<{replicated}>]}
func.func @reduce_backward(%a: tensor<8x6xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x6xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %z = hlo.constant dense<0.0> : tensor<f32>
    %s = hlo.reduce(%x init : %z) applies add across dimensions = [0] : (tensor<8x6xf32>, tensor<f32>) -> tensor<6xf32>
    %ss = tpu.sharding_constraint %s to #tpu.sharding<{devices=[2]<=[2]}> : tensor<6xf32>
    tpu.yield %ss : tensor<6xf32>
  }
  func.return
}

// -----

// slice keeps the tiling of dimensions it does not cut, and of a cut
// dimension whose tile count divides both sizes (GSPMD's HandleSlice): rows
// 1::2 of 8 in 2 tiles are rows 1::2 of each tile of 4 (local); rows 1:5 in
// 2 tiles are a window of each tile and its neighbour's (halo exchange in
// tpu-spmd-partition); rows 1:4 (3 rows) cannot be split in 2: replicated.
// CHECK-LABEL: func @slice
// CHECK:         %cols = hlo.slice {{.*}} {tpu.sharding = [#tpu.sharding<{devices=[2,1]<=[2]}>]}
// CHECK-NEXT:    %odd = hlo.slice {{.*}} {tpu.sharding = [#tpu.sharding<{devices=[2,1]<=[2]}>]}
// CHECK-NEXT:    %rows = hlo.slice {{.*}} {tpu.sharding = [#tpu.sharding<{devices=[2,1]<=[2]}>]}
// CHECK-NEXT:    %three = hlo.slice {{.*}} {tpu.sharding = [#tpu.sharding<{replicated}>]}
func.func @slice(%a: tensor<8x6xf32>) {
  %r:4 = tpu.replicate([%a] as %x: tensor<8x6xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1]<=[2]}> : tensor<8x6xf32>
    %cols = hlo.slice %xs, start = [0, 1], limit = [8, 4], strides = [1, 1] : (tensor<8x6xf32>) -> tensor<8x3xf32>
    %odd = hlo.slice %xs, start = [1, 0], limit = [8, 6], strides = [2, 1] : (tensor<8x6xf32>) -> tensor<4x6xf32>
    %rows = hlo.slice %xs, start = [1, 0], limit = [5, 6], strides = [1, 1] : (tensor<8x6xf32>) -> tensor<4x6xf32>
    %three = hlo.slice %xs, start = [1, 0], limit = [4, 6], strides = [1, 1] : (tensor<8x6xf32>) -> tensor<3x6xf32>
    tpu.yield %cols, %odd, %rows, %three : tensor<8x3xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<3x6xf32>
  }
  func.return
}

// -----

// concatenate keeps the tiling of the other dimensions (and gives it to the
// other input, backward), and of the concatenated dimension when its tile
// count divides every input (GSPMD's HandleConcatenate); 6 rows and 3 rows
// in 2 tiles cannot: replicated.
// CHECK-LABEL: func @concatenate
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[2,1]<=[2]}>, #tpu.sharding<{devices=[2,1]<=[2]}>]
// CHECK:         %c = hlo.concatenate %xs, %y dim = 1 {tpu.sharding = [#tpu.sharding<{devices=[2,1]<=[2]}>]}
// CHECK-NEXT:    %d = hlo.concatenate %xs, %xs dim = 0 {tpu.sharding = [#tpu.sharding<{devices=[2,1]<=[2]}>]}
// CHECK:         %e = hlo.concatenate %xs, %t dim = 0 {tpu.sharding = [#tpu.sharding<{replicated}>]}
func.func @concatenate(%a: tensor<4x6xf32>, %b: tensor<4x2xf32>) {
  %r:3 = tpu.replicate([%a] as %x: tensor<4x6xf32>, [%b] as %y: tensor<4x2xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1]<=[2]}> : tensor<4x6xf32>
    %c = hlo.concatenate %xs, %y dim = 1 : (tensor<4x6xf32>, tensor<4x2xf32>) -> tensor<4x8xf32>
    %d = hlo.concatenate %xs, %xs dim = 0 : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
    %t = hlo.slice %xs, start = [0, 0], limit = [3, 6], strides = [1, 1] : (tensor<4x6xf32>) -> tensor<3x6xf32>
    %e = hlo.concatenate %xs, %t dim = 0 : (tensor<4x6xf32>, tensor<3x6xf32>) -> tensor<7x6xf32>
    tpu.yield %c, %d, %e : tensor<4x8xf32>, tensor<8x6xf32>, tensor<7x6xf32>
  }
  func.return
}

// -----

// iota and constant have no operands: they take what their users ask for.
// CHECK-LABEL: func @iota_and_constant_take_users_sharding
// CHECK:         %i = hlo.iota dim = 0 {tpu.sharding = [#tpu.sharding<{devices=[1,2]<=[2]}>]}
// CHECK-NEXT:    %c = hlo.constant {tpu.sharding = [#tpu.sharding<{devices=[1,2]<=[2]}>]}
func.func @iota_and_constant_take_users_sharding(%a: tensor<8x4xi32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x4xi32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,2]<=[2]}> : tensor<8x4xi32>
    %i = hlo.iota dim = 0 : tensor<8x4xi32>
    %c = hlo.constant dense<1> : tensor<8x4xi32>
    %s = hlo.add %i, %xs : tensor<8x4xi32>
    %t = hlo.multiply %s, %c : tensor<8x4xi32>
    tpu.yield %t : tensor<8x4xi32>
  }
  func.return
}

// -----

// hlo.if: the result takes the true branch's value; backward, the false
// branch's constant takes the result's sharding. Ops in regions are annotated.
// CHECK-LABEL: func @if_regions
// CHECK:         %y = hlo.if %q -> (tensor<8xf32>) {
// CHECK-NEXT:      %e = hlo.exponential %xs {tpu.sharding = [#tpu.sharding<{devices=[2]<=[2]}>]}
// CHECK:           %c = hlo.constant {tpu.sharding = [#tpu.sharding<{devices=[2]<=[2]}>]}
// CHECK:         } {tpu.sharding = [#tpu.sharding<{devices=[2]<=[2]}>]}
func.func @if_regions(%a: tensor<8xf32>, %p: tensor<i1>) {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>, [%p] as %q: tensor<i1>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2]<=[2]}> : tensor<8xf32>
    %y = hlo.if %q -> (tensor<8xf32>) {
      %e = hlo.exponential %xs : tensor<8xf32>
      hlo.return %e : tensor<8xf32>
    } else {
      %c = hlo.constant dense<1.0> : tensor<8xf32>
      hlo.return %c : tensor<8xf32>
    }
    tpu.yield %y : tensor<8xf32>
  }
  func.return
}

// -----

// hlo.while: the loop operand, the region arguments, the body's returned
// value and the result share one sharding; the counter stays replicated.
// CHECK-LABEL: func @while_loop_carried
// CHECK:         tpu.output_shardings = [#tpu.sharding<{replicated}>, #tpu.sharding<{devices=[2]<=[2]}>]
// CHECK:         hlo.while(%k = %i0, %v = %xs) : tensor<i32>, tensor<8xf32> attributes {tpu.sharding = [#tpu.sharding<{replicated}>, #tpu.sharding<{devices=[2]<=[2]}>]} cond {
// CHECK:           %p = hlo.compare LT, %k, %ten {tpu.sharding = [#tpu.sharding<{replicated}>]}
// CHECK:           %k2 = hlo.add %k1, %one {tpu.sharding = [#tpu.sharding<{replicated}>]}
// CHECK-NEXT:      %v2 = hlo.tanh %v1 {tpu.sharding = [#tpu.sharding<{devices=[2]<=[2]}>]}
func.func @while_loop_carried(%a: tensor<8xf32>, %i: tensor<i32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<8xf32>, [%i] as %i0: tensor<i32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2]<=[2]}> : tensor<8xf32>
    %w:2 = hlo.while(%k = %i0, %v = %xs) : tensor<i32>, tensor<8xf32> cond {
      %ten = hlo.constant dense<10> : tensor<i32>
      %p = hlo.compare LT, %k, %ten : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %p : tensor<i1>
    } do {
    ^bb0(%k1: tensor<i32>, %v1: tensor<8xf32>):
      %one = hlo.constant dense<1> : tensor<i32>
      %k2 = hlo.add %k1, %one : tensor<i32>
      %v2 = hlo.tanh %v1 : tensor<8xf32>
      hlo.return %k2, %v2 : tensor<i32>, tensor<8xf32>
    }
    tpu.yield %w#0, %w#1 : tensor<i32>, tensor<8xf32>
  }
  func.return
}

// -----

// A constraint on a loop value inside the body reaches, through the loop,
// the value before the loop (and the constant and input it comes from) and
// the loop's result.
// CHECK-LABEL: func @while_constraint_in_body
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[1,2]<=[2]}>], tpu.output_shardings = [#tpu.sharding<{devices=[1,2]<=[2]}>]
// CHECK:         %c = hlo.constant {tpu.sharding = [#tpu.sharding<{devices=[1,2]<=[2]}>]}
// CHECK-NEXT:    %s = hlo.add %x, %c {tpu.sharding = [#tpu.sharding<{devices=[1,2]<=[2]}>]}
// CHECK-NEXT:    %w = hlo.while(%v = %s) : tensor<8x4xf32> attributes {tpu.sharding = [#tpu.sharding<{devices=[1,2]<=[2]}>]} cond {
// CHECK:           %v2 = hlo.multiply %vs, %vs {tpu.sharding = [#tpu.sharding<{devices=[1,2]<=[2]}>]}
func.func @while_constraint_in_body(%a: tensor<8x4xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x4xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %c = hlo.constant dense<0.5> : tensor<8x4xf32>
    %s = hlo.add %x, %c : tensor<8x4xf32>
    %w = hlo.while(%v = %s) : tensor<8x4xf32> cond {
      %z = hlo.constant dense<true> : tensor<i1>
      hlo.return %z : tensor<i1>
    } do {
    ^bb0(%v1: tensor<8x4xf32>):
      %vs = tpu.sharding_constraint %v1 to #tpu.sharding<{devices=[1,2]<=[2]}> : tensor<8x4xf32>
      %v2 = hlo.multiply %vs, %vs : tensor<8x4xf32>
      hlo.return %v2 : tensor<8x4xf32>
    }
    tpu.yield %w : tensor<8x4xf32>
  }
  func.return
}

// -----

// Conflict, equally many tiles: the earlier operand wins. Constraints are
// never overridden.
// CHECK-LABEL: func @conflict_equal_tiles_first_operand_wins
// CHECK:         %s = hlo.add %ys, %xs {tpu.sharding = [#tpu.sharding<{devices=[1,2]<=[2]}>]}
// CHECK-NEXT:    %t = hlo.add %xs, %ys {tpu.sharding = [#tpu.sharding<{devices=[2,1]<=[2]}>]}
func.func @conflict_equal_tiles_first_operand_wins(%a: tensor<8x4xf32>, %b: tensor<8x4xf32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<8x4xf32>, [%b] as %y: tensor<8x4xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1]<=[2]}> : tensor<8x4xf32>
    %ys = tpu.sharding_constraint %y to #tpu.sharding<{devices=[1,2]<=[2]}> : tensor<8x4xf32>
    %s = hlo.add %ys, %xs : tensor<8x4xf32>
    %t = hlo.add %xs, %ys : tensor<8x4xf32>
    tpu.yield %s, %t : tensor<8x4xf32>, tensor<8x4xf32>
  }
  func.return
}

// -----

// Conflict: the sharding with more tiles wins, whatever the operand order.
// CHECK-LABEL: func @conflict_more_tiles_win
// CHECK:         %s = hlo.subtract %ys, %xs {tpu.sharding = [#tpu.sharding<{devices=[4,1]<=[4]}>]}
func.func @conflict_more_tiles_win(%a: tensor<8x4xf32>, %b: tensor<8x4xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x4xf32>, [%b] as %y: tensor<8x4xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[4,1]<=[4]}> : tensor<8x4xf32>
    %ys = tpu.sharding_constraint %y to #tpu.sharding<{devices=[1,2,2]<=[4] last_tile_dim_replicate}> : tensor<8x4xf32>
    %s = hlo.subtract %ys, %xs : tensor<8x4xf32>
    tpu.yield %s : tensor<8x4xf32>
  }
  func.return
}

// -----

// Compatible partial shardings are not a conflict: they merge.
// CHECK-LABEL: func @compatible_partial_shardings_merge
// CHECK:         %s = hlo.maximum %xs, %ys {tpu.sharding = [#tpu.sharding<{devices=[2,2]<=[4]}>]}
func.func @compatible_partial_shardings_merge(%a: tensor<8x4xf32>, %b: tensor<8x4xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x4xf32>, [%b] as %y: tensor<8x4xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1,2]<=[4] last_tile_dim_replicate}> : tensor<8x4xf32>
    %ys = tpu.sharding_constraint %y to #tpu.sharding<{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}> : tensor<8x4xf32>
    %s = hlo.maximum %xs, %ys : tensor<8x4xf32>
    tpu.yield %s : tensor<8x4xf32>
  }
  func.return
}

// -----

// Conflict between forward and backward with equally many tiles: forward
// wins; the constraint keeps its own sharding (the partitioner reshards).
// CHECK-LABEL: func @forward_before_backward
// CHECK:         %e = hlo.exponential %xs {tpu.sharding = [#tpu.sharding<{devices=[2,1]<=[2]}>]}
// CHECK-NEXT:    %es = tpu.sharding_constraint %e to #tpu.sharding<{devices=[1,2]<=[2]}> {tpu.sharding = [#tpu.sharding<{devices=[1,2]<=[2]}>]}
func.func @forward_before_backward(%a: tensor<8x4xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x4xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1]<=[2]}> : tensor<8x4xf32>
    %e = hlo.exponential %xs : tensor<8x4xf32>
    %es = tpu.sharding_constraint %e to #tpu.sharding<{devices=[1,2]<=[2]}> : tensor<8x4xf32>
    tpu.yield %es : tensor<8x4xf32>
  }
  func.return
}

// -----

// A backward candidate with more tiles replaces a forward one.
// CHECK-LABEL: func @backward_more_tiles_win
// CHECK:         %e = hlo.exponential %xs {tpu.sharding = [#tpu.sharding<{devices=[1,4]<=[4]}>]}
func.func @backward_more_tiles_win(%a: tensor<8x4xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x4xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1,2]<=[4] last_tile_dim_replicate}> : tensor<8x4xf32>
    %e = hlo.exponential %xs : tensor<8x4xf32>
    %es = tpu.sharding_constraint %e to #tpu.sharding<{devices=[1,4]<=[4]}> : tensor<8x4xf32>
    tpu.yield %es : tensor<8x4xf32>
  }
  func.return
}

// -----

// Where no split is legal for the value (6 rows in 4 tiles), the value is
// {replicated}; 2x2x2 has no dimension of 4, but the 4 chunks of 8 are
// tiles [2,2,1] of it.
// CHECK-LABEL: func @illegal_split_becomes_replicated
// CHECK:         %s = hlo.slice {{.*}} {tpu.sharding = [#tpu.sharding<{replicated}>]}
// CHECK-NEXT:    %t = hlo.reshape %xs {tpu.sharding = [#tpu.sharding<{devices=[2,2,1]<=[4]}>]}
func.func @illegal_split_becomes_replicated(%a: tensor<8xf32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[4]<=[4]}> : tensor<8xf32>
    %s = hlo.slice %xs, start = [0], limit = [6], strides = [1] : (tensor<8xf32>) -> tensor<6xf32>
    %t = hlo.reshape %xs : (tensor<8xf32>) -> tensor<2x2x2xf32>
    tpu.yield %s, %t : tensor<6xf32>, tensor<2x2x2xf32>
  }
  func.return
}

// -----

// {maximal device=N} (assign_to_logical_device) passes through every op,
// rank changes included; a tiling is more specific than it.
// CHECK-LABEL: func @maximal
// CHECK:         tpu.input_shardings = [#tpu.sharding<{maximal device=1}>, #tpu.sharding<{devices=[2]<=[2]}>]
// CHECK:         %n = hlo.negate %xs {tpu.sharding = [#tpu.sharding<{devices=[2]<=[2]}>]}
// CHECK-NEXT:    %z = hlo.constant {tpu.sharding = [#tpu.sharding<{maximal device=1}>]}
// CHECK-NEXT:    %s = hlo.reduce{{.*}} {tpu.sharding = [#tpu.sharding<{maximal device=1}>]}
func.func @maximal(%a: tensor<8xf32>, %b: tensor<8xf32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<8xf32>, [%b] as %y: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{maximal device=1}> : tensor<8xf32>
    %n = hlo.negate %xs : tensor<8xf32>
    %z = hlo.constant dense<0.0> : tensor<f32>
    %s = hlo.reduce(%n init : %z) applies add across dimensions = [0] : (tensor<8xf32>, tensor<f32>) -> tensor<f32>
    %ys = tpu.sharding_constraint %y to #tpu.sharding<{devices=[2]<=[2]}> : tensor<8xf32>
    %t = hlo.add %n, %ys : tensor<8xf32>
    tpu.yield %s, %t : tensor<f32>, tensor<8xf32>
  }
  func.return
}

// -----

// Host transfers: what the host sends back is {replicated}, fixed; sending a
// split value asks nothing of it.
// CHECK-LABEL: func @host_transfers_are_replicated
// CHECK:         tpu.send_to_host "host_compute_channel_c0_args"(%xs : tensor<8xf32>)
// CHECK-NEXT:    %h = tpu.recv_from_host "host_compute_channel_c0_retvals" {tpu.sharding = [#tpu.sharding<{replicated}>]}
// CHECK-NEXT:    %s = hlo.add %h, %xs {tpu.sharding = [#tpu.sharding<{devices=[2]<=[2]}>]}
func.func @host_transfers_are_replicated(%a: tensor<8xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2]<=[2]}> : tensor<8xf32>
    tpu.send_to_host "host_compute_channel_c0_args" (%xs : tensor<8xf32>)
    %h = tpu.recv_from_host "host_compute_channel_c0_retvals" : tensor<8xf32>
    %s = hlo.add %h, %xs : tensor<8xf32>
    tpu.yield %s : tensor<8xf32>
  }
  func.return
}

// -----

// An outside-compilation cluster runs on the host: its results are
// {replicated}; the ops inside get no sharding.
// CHECK-LABEL: func @outside_compilation_cluster
// CHECK:         %h = tpu.outside_compilation "c0" -> (tensor<8xf32>) attributes {tpu.sharding = [#tpu.sharding<{replicated}>]} {
// CHECK-NEXT:      %n = hlo.negate %xs : tensor<8xf32>
func.func @outside_compilation_cluster(%a: tensor<8xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2]<=[2]}> : tensor<8xf32>
    %h = tpu.outside_compilation "c0" -> (tensor<8xf32>) {
      %n = hlo.negate %xs : tensor<8xf32>
      tpu.yield %n : tensor<8xf32>
    }
    %s = hlo.add %h, %xs : tensor<8xf32>
    tpu.yield %s : tensor<8xf32>
  }
  func.return
}

// -----

// Sums over replicas keep the layout over cores: tpu.cross_replica_sum, and a
// ccl.all_reduce whose groups each hold one core of several replicas
// (participant r * 2 + c); an all_reduce between the cores of a replica has no
// rule: {replicated}.
// CHECK-LABEL: func @cross_replica_sums_pass_through
// CHECK:         %s = tpu.cross_replica_sum %xs {tpu.sharding = [#tpu.sharding<{devices=[2]<=[2]}>]}
// CHECK-NEXT:    %t = ccl.all_reduce {{.*}} channel 1 {tpu.sharding = [#tpu.sharding<{devices=[2]<=[2]}>]}
// CHECK-NEXT:    %u = ccl.all_reduce {{.*}} channel 2 {tpu.sharding = [#tpu.sharding<{replicated}>]}
func.func @cross_replica_sums_pass_through(%a: tensor<8xf32>, %b: tensor<8xf32>) {
  %r:6 = tpu.replicate([%a, %b] as %x: tensor<8xf32>) {n = 2 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2]<=[2]}> : tensor<8xf32>
    %s = tpu.cross_replica_sum %xs : tensor<8xf32>
    %t = ccl.all_reduce %xs applies add groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64> channel 1 : tensor<8xf32>
    %u = ccl.all_reduce %xs applies add groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64> channel 2 : tensor<8xf32>
    tpu.yield %s, %t, %u : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  }
  func.return
}

// -----

// The seed (split_to_logical_devices.txt): an image [batch, width, height,
// channel] split [1, 2, 4, 1] over 8 logical devices, into a small model.
// Flattening keeps the width split (the leading dimension of the merged
// group), replicated over the height split; the dense layer's weights take
// that split of k, the dense layer sums partial products: replicated from
// there on.
// CHECK-LABEL: func @seed_image_over_8_devices
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[1,2,4,1]<=[8]}>, #tpu.sharding<{devices=[2,1,4]<=[8] last_tile_dim_replicate}>, #tpu.sharding<{replicated}>], tpu.output_shardings = [#tpu.sharding<{replicated}>]
// CHECK:         %scaled = hlo.multiply %xs, %xs {tpu.sharding = [#tpu.sharding<{devices=[1,2,4,1]<=[8]}>]}
// CHECK-NEXT:    %flat = hlo.reshape %scaled {tpu.sharding = [#tpu.sharding<{devices=[1,2,4]<=[8] last_tile_dim_replicate}>]}
// CHECK-NEXT:    %d = hlo.dot_general {{.*}} {tpu.sharding = [#tpu.sharding<{replicated}>]}
// CHECK-NEXT:    %bb = hlo.broadcast_in_dim {{.*}} {tpu.sharding = [#tpu.sharding<{replicated}>]}
// CHECK-NEXT:    %h = hlo.add %d, %bb {tpu.sharding = [#tpu.sharding<{replicated}>]}
// CHECK:         %relu = hlo.maximum %h, %zb {tpu.sharding = [#tpu.sharding<{replicated}>]}
// CHECK-NEXT:    %s = hlo.reduce{{.*}} {tpu.sharding = [#tpu.sharding<{replicated}>]}
func.func @seed_image_over_8_devices(%img: tensor<8x32x32x3xf32>, %w: tensor<3072x16xf32>, %bias: tensor<16xf32>) {
  %r = tpu.replicate([%img] as %x: tensor<8x32x32x3xf32>, [%w] as %wt: tensor<3072x16xf32>, [%bias] as %b: tensor<16xf32>) {n = 1 : i64, num_cores_per_replica = 8 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,2,4,1]<=[8]}> : tensor<8x32x32x3xf32>
    %scaled = hlo.multiply %xs, %xs : tensor<8x32x32x3xf32>
    %flat = hlo.reshape %scaled : (tensor<8x32x32x3xf32>) -> tensor<8x3072xf32>
    %d = hlo.dot_general %flat, %wt, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<8x3072xf32>, tensor<3072x16xf32>) -> tensor<8x16xf32>
    %bb = hlo.broadcast_in_dim %b, dims = [1] : (tensor<16xf32>) -> tensor<8x16xf32>
    %h = hlo.add %d, %bb : tensor<8x16xf32>
    %z = hlo.constant dense<0.0> : tensor<f32>
    %zb = hlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> tensor<8x16xf32>
    %relu = hlo.maximum %h, %zb : tensor<8x16xf32>
    %s = hlo.reduce(%relu init : %z) applies add across dimensions = [1] : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>
    tpu.yield %s : tensor<8xf32>
  }
  func.return
}

// -----

// The same model with the batch split too ([2, 2, 2, 1]): the batch split
// survives the dense layer, the relu and the reduction over features.
// CHECK-LABEL: func @seed_image_batch_split
// CHECK:         tpu.input_shardings = [#tpu.sharding<{devices=[2,2,2,1]<=[8]}>, #tpu.sharding<{devices=[2,1,4]0,1,4,5,2,3,6,7 last_tile_dim_replicate}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,4]<=[8] last_tile_dim_replicate}>]
// CHECK:         %flat = hlo.reshape %xs {tpu.sharding = [#tpu.sharding<{devices=[2,2,2]<=[8] last_tile_dim_replicate}>]}
// CHECK-NEXT:    %d = hlo.dot_general {{.*}} {tpu.sharding = [#tpu.sharding<{devices=[2,1,4]<=[8] last_tile_dim_replicate}>]}
// CHECK:         %relu = hlo.maximum %d, %zb {tpu.sharding = [#tpu.sharding<{devices=[2,1,4]<=[8] last_tile_dim_replicate}>]}
// CHECK-NEXT:    %s = hlo.reduce{{.*}} {tpu.sharding = [#tpu.sharding<{devices=[2,4]<=[8] last_tile_dim_replicate}>]}
func.func @seed_image_batch_split(%img: tensor<8x32x32x3xf32>, %w: tensor<3072x16xf32>) {
  %r = tpu.replicate([%img] as %x: tensor<8x32x32x3xf32>, [%w] as %wt: tensor<3072x16xf32>) {n = 1 : i64, num_cores_per_replica = 8 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,2,2,1]<=[8]}> : tensor<8x32x32x3xf32>
    %flat = hlo.reshape %xs : (tensor<8x32x32x3xf32>) -> tensor<8x3072xf32>
    %d = hlo.dot_general %flat, %wt, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<8x3072xf32>, tensor<3072x16xf32>) -> tensor<8x16xf32>
    %z = hlo.constant dense<0.0> : tensor<f32>
    %zb = hlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> tensor<8x16xf32>
    %relu = hlo.maximum %d, %zb : tensor<8x16xf32>
    %s = hlo.reduce(%relu init : %z) applies add across dimensions = [1] : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>
    tpu.yield %s : tensor<8xf32>
  }
  func.return
}

// -----

// One logical core: nothing to propagate, the replicate is left unchanged.
// CHECK-LABEL: func @one_core_unchanged
// CHECK-NOT:     tpu.sharding =
// CHECK-NOT:     tpu.input_shardings
// CHECK:         func.return
func.func @one_core_unchanged(%a: tensor<8xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{replicated}> : tensor<8xf32>
    %n = hlo.negate %xs : tensor<8xf32>
    tpu.yield %n : tensor<8xf32>
  }
  func.return
}

// -----

// A host replicate (head/tail outside compilation) is left unchanged.
// CHECK-LABEL: func @host_replicate_unchanged
// CHECK-NOT:     tpu.sharding =
// CHECK:         func.return
func.func @host_replicate_unchanged(%a: tensor<8xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, placement = "host"} {
    %n = hlo.negate %x : tensor<8xf32>
    tpu.yield %n : tensor<8xf32>
  }
  func.return
}

// -----

// CHECK: 'tpu.sharding_constraint' op (at model.py:3) lays the value out over 2 logical devices ({devices=[2]<=[2]}), but the enclosing tpu.replicate has num_cores_per_replica = 4
func.func @too_few_devices(%a: tensor<8xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2]<=[2]}> : tensor<8xf32> loc("model.py":3:7)
    tpu.yield %xs : tensor<8xf32>
  }
  func.return
}

// -----

// CHECK: 'tpu.sharding_constraint' op lays the value out over 2 logical devices ({devices=[2]<=[2]}), but the enclosing tpu.replicate has num_cores_per_replica = 1
func.func @split_with_one_core(%a: tensor<8xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2]<=[2]}> : tensor<8xf32>
    tpu.yield %xs : tensor<8xf32>
  }
  func.return
}

// -----

// CHECK: 'tpu.sharding_constraint' op assigns the value to logical device 2, but the enclosing tpu.replicate has 2 logical devices per replica (0..1)
func.func @maximal_device_out_of_range(%a: tensor<8xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{maximal device=2}> : tensor<8xf32>
    tpu.yield %xs : tensor<8xf32>
  }
  func.return
}

// -----

// CHECK: 'tpu.sharding_constraint' op has the sharding {manual}, which tpu-propagate-sharding does not support: a value inside a tpu.replicate is global until tpu-spmd-partition makes it per device
func.func @manual(%a: tensor<8xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{manual}> : tensor<8xf32>
    tpu.yield %xs : tensor<8xf32>
  }
  func.return
}

// -----

// Reshape with more tiles than the new leading dimension (GSPMD's
// ReshapeSharding): 64 rows in 8 tiles -> 4x16 rows are the same 8 chunks
// tiled [4,2]; merging them back gives the 8 tiles of the rows again.
// CHECK-LABEL: func @reshape_tiles_over_two_dimensions
// CHECK:         %t = hlo.reshape %xs {tpu.sharding = [#tpu.sharding<{devices=[4,2,1]<=[8]}>]} : (tensor<64x16xf32>) -> tensor<4x16x16xf32>
// CHECK-NEXT:    %e = hlo.exponential %t {tpu.sharding = [#tpu.sharding<{devices=[4,2,1]<=[8]}>]}
// CHECK-NEXT:    %b = hlo.reshape %e {tpu.sharding = [#tpu.sharding<{devices=[8,1]<=[8]}>]} : (tensor<4x16x16xf32>) -> tensor<64x16xf32>
func.func @reshape_tiles_over_two_dimensions(%a: tensor<64x16xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<64x16xf32>) {n = 1 : i64, num_cores_per_replica = 8 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[8,1]<=[8]}> : tensor<64x16xf32>
    %t = hlo.reshape %xs : (tensor<64x16xf32>) -> tensor<4x16x16xf32>
    %e = hlo.exponential %t : tensor<4x16x16xf32>
    %b = hlo.reshape %e : (tensor<4x16x16xf32>) -> tensor<64x16xf32>
    tpu.yield %b : tensor<64x16xf32>
  }
  func.return
}

// -----

// A fusion.region hides its ops: the pass runs before hlo-fuse-elementwise.
// CHECK: 'fusion.region' op is formed by hlo-fuse-elementwise, the last pass: tpu-propagate-sharding runs before it
func.func @after_fusion(%a: tensor<8xf32>) {
  tpu.replicate([%a] as %x: tensor<8xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %y = fusion.region "loop"(%x) : (tensor<8xf32>) -> tensor<8xf32> {
    ^bb0(%b: tensor<8xf32>):
      %n = hlo.negate %b : tensor<8xf32>
      %e = hlo.exponential %n : tensor<8xf32>
      fusion.yield %e : tensor<8xf32>
    }
    tpu.yield
  }
  func.return
}
