// tpu-spmd-partition's rules for the windowed ops (passes/spmd_windowed.py,
// after GSPMD's convolution and windowed-op handlers): spatial splits
// exchange halos with ccl.collective_permute (exactly the rows and columns
// the window needs), batch and output-feature splits are local, an
// input-feature split (and the kernel gradient's form) sums partial results
// with ccl.all_reduce.  Bytes per core (xtpu.passes.spmd_cost) are given per
// case; test_conv_spmd.py checks them.
// RUN: xtpu-opt %s --split-input-file -p tpu-propagate-sharding,tpu-spmd-partition | filecheck %s

// A 3x3 SAME convolution of an image split [1, 2, 2, 1] (GSPMD's windowed
// convolution): each core's output tile needs one row and one column of
// each neighbour.  The rows move first (one permute per direction, 2x1x4x3),
// then the columns of the row-extended tile (2x6x1x3, corners included);
// positions outside the image become 0 (select), and the convolution runs
// unpadded on the 2x6x6x3 window: 96 + 144 = 240 bytes per core.
// CHECK-LABEL: func @conv_spatial_halo
// CHECK:         as %x: tensor<2x4x4x3xf32>
// CHECK:         ccl.collective_permute %{{.*}} pairs = dense<{{\[\[}}0, 2], [1, 3{{\]\]}}> : tensor<2x2xi64> channel 1 : tensor<2x1x4x3xf32>
// CHECK:         ccl.collective_permute %{{.*}} pairs = dense<{{\[\[}}2, 0], [3, 1{{\]\]}}> : tensor<2x2xi64> channel 2 : tensor<2x1x4x3xf32>
// CHECK:         hlo.concatenate {{.*}} -> tensor<2x6x4x3xf32>
// CHECK:         hlo.select {{.*}} -> tensor<2x6x4x3xf32>
// CHECK:         ccl.collective_permute %{{.*}} pairs = dense<{{\[\[}}0, 1], [2, 3{{\]\]}}> : tensor<2x2xi64> channel 3 : tensor<2x6x1x3xf32>
// CHECK:         ccl.collective_permute %{{.*}} pairs = dense<{{\[\[}}1, 0], [3, 2{{\]\]}}> : tensor<2x2xi64> channel 4 : tensor<2x6x1x3xf32>
// CHECK:         %[[W:.*]] = hlo.select {{.*}} -> tensor<2x6x6x3xf32>
// CHECK-NEXT:    %y = hlo.convolution(%[[W]], %w) {{.*}} pad = {{\[\[}}0, 0], [0, 0{{\]\]}}, {{.*}} : (tensor<2x6x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x4x4x4xf32>
// CHECK-NEXT:    tpu.yield %y : tensor<2x4x4x4xf32>
// CHECK-NOT:     ccl.all_gather
func.func @conv_spatial_halo(%a: tensor<2x8x8x3xf32>, %k: tensor<3x3x3x4xf32>) -> tensor<2x8x8x4xf32> {
  %r = tpu.replicate([%a] as %x: tensor<2x8x8x3xf32>, [%k] as %w: tensor<3x3x3x4xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,2,2,1]<=[4]}> : tensor<2x8x8x3xf32>
    %y = hlo.convolution(%xs, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x8x8x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x8x8x4xf32>
    tpu.yield %y : tensor<2x8x8x4xf32>
  }
  func.return %r : tensor<2x8x8x4xf32>
}

// -----

// Stride 2 with padding only after the last row: core j's two output rows
// read input rows 4j .. 4j + 4, so each core but the last takes one row from
// its right neighbour (one permute, 1x1x6x2: 48 bytes per core); the last
// core's missing row is the padding (select).  The unsplit width keeps its
// padding.
// CHECK-LABEL: func @conv_strided_uneven_halo
// CHECK:         as %x: tensor<1x4x6x2xf32>
// CHECK:         ccl.collective_permute %{{.*}} pairs = dense<{{\[\[}}1, 0], [2, 1], [3, 2{{\]\]}}> : tensor<3x2xi64> channel 1 : tensor<1x1x6x2xf32>
// CHECK-NOT:     ccl.collective_permute
// CHECK:         %y = hlo.convolution({{.*}}, %w) {{.*}} window = {stride = [2, 2], pad = {{\[\[}}0, 0], [1, 1{{\]\]}}, {{.*}} : (tensor<1x5x6x2xf32>, tensor<3x3x2x2xf32>) -> tensor<1x2x3x2xf32>
func.func @conv_strided_uneven_halo(%a: tensor<1x16x6x2xf32>, %k: tensor<3x3x2x2xf32>) -> tensor<1x8x3x2xf32> {
  %r = tpu.replicate([%a] as %x: tensor<1x16x6x2xf32>, [%k] as %w: tensor<3x3x2x2xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,4,1,1]<=[4]}> : tensor<1x16x6x2xf32>
    %y = hlo.convolution(%xs, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [2, 2], pad = [[0, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x16x6x2xf32>, tensor<3x3x2x2xf32>) -> tensor<1x8x3x2xf32>
    tpu.yield %y : tensor<1x8x3x2xf32>
  }
  func.return %r : tensor<1x8x3x2xf32>
}

// -----

// A batch split is local: no collective.
// CHECK-LABEL: func @conv_batch_split_is_local
// CHECK:         as %x: tensor<1x6x6x3xf32>
// CHECK-NEXT:      %y = hlo.convolution(%x, %w) {{.*}} : (tensor<1x6x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT:      tpu.yield %y : tensor<1x4x4x4xf32>
// CHECK-NOT:     ccl.
func.func @conv_batch_split_is_local(%a: tensor<4x6x6x3xf32>, %k: tensor<3x3x3x4xf32>) -> tensor<4x4x4x4xf32> {
  %r = tpu.replicate([%a] as %x: tensor<4x6x6x3xf32>, [%k] as %w: tensor<3x3x3x4xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[4,1,1,1]<=[4]}> : tensor<4x6x6x3xf32>
    %y = hlo.convolution(%xs, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<4x6x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<4x4x4x4xf32>
    tpu.yield %y : tensor<4x4x4x4xf32>
  }
  func.return %r : tensor<4x4x4x4xf32>
}

// -----

// The filters split on output channels: each core computes its channels of
// the whole image; no collective.
// CHECK-LABEL: func @conv_output_feature_split_is_local
// CHECK:         as %w: tensor<3x3x3x2xf32>
// CHECK-NEXT:      %y = hlo.convolution(%x, %w) {{.*}} : (tensor<2x6x6x3xf32>, tensor<3x3x3x2xf32>) -> tensor<2x4x4x2xf32>
// CHECK-NEXT:      tpu.yield %y : tensor<2x4x4x2xf32>
// CHECK-NOT:     ccl.
func.func @conv_output_feature_split_is_local(%a: tensor<2x6x6x3xf32>, %k: tensor<3x3x3x8xf32>) -> tensor<2x4x4x8xf32> {
  %r = tpu.replicate([%a] as %x: tensor<2x6x6x3xf32>, [%k] as %w: tensor<3x3x3x8xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %wc = tpu.sharding_constraint %w to #tpu.sharding<{devices=[1,1,1,4]<=[4]}> : tensor<3x3x3x8xf32>
    %y = hlo.convolution(%x, %wc) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x6x6x3xf32>, tensor<3x3x3x8xf32>) -> tensor<2x4x4x8xf32>
    tpu.yield %y : tensor<2x4x4x8xf32>
  }
  func.return %r : tensor<2x4x4x8xf32>
}

// -----

// Input channels split on the image and the filters alike: each core
// convolves its two channels and an all_reduce sums the partial results
// (768 bytes per core).
// CHECK-LABEL: func @conv_input_feature_split_sums
// CHECK:         %y_partial = hlo.convolution(%x, %w) {{.*}} : (tensor<2x6x6x2xf32>, tensor<3x3x2x4xf32>) -> tensor<2x4x4x4xf32>
// CHECK-NEXT:    %y = ccl.all_reduce %y_partial applies add groups = dense<{{\[\[}}0, 1, 2, 3{{\]\]}}> : tensor<1x4xi64> channel 1 : tensor<2x4x4x4xf32>
// CHECK-NOT:     ccl.all_gather
func.func @conv_input_feature_split_sums(%a: tensor<2x6x6x8xf32>, %k: tensor<3x3x8x4xf32>) -> tensor<2x4x4x4xf32> {
  %r = tpu.replicate([%a] as %x: tensor<2x6x6x8xf32>, [%k] as %w: tensor<3x3x8x4xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,1,1,4]<=[4]}> : tensor<2x6x6x8xf32>
    %wc = tpu.sharding_constraint %w to #tpu.sharding<{devices=[1,1,4,1]<=[4]}> : tensor<3x3x8x4xf32>
    %y = hlo.convolution(%xs, %wc) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x6x6x8xf32>, tensor<3x3x8x4xf32>) -> tensor<2x4x4x4xf32>
    tpu.yield %y : tensor<2x4x4x4xf32>
  }
  func.return %r : tensor<2x4x4x4xf32>
}

// -----

// The same input-feature split with the result split on its output features
// over the same cores: each core's partial result (the whole 2x4x4x4) is
// summed and scattered by one ccl.reduce_scatter, each core keeping its
// feature (gathering the image and resharding the filters instead would move
// 1944 bytes; this moves 3/4 of 512 bytes = 384 bytes per core).
// CHECK-LABEL: func @conv_input_feature_split_scatters
// CHECK:         %y_partial = hlo.convolution(%x, %w) {{.*}} : (tensor<2x6x6x2xf32>, tensor<3x3x2x4xf32>) -> tensor<2x4x4x4xf32>
// CHECK-NEXT:    %y = ccl.reduce_scatter %y_partial applies add dim = 3 groups = dense<{{\[\[}}0, 1, 2, 3{{\]\]}}> : tensor<1x4xi64> channel 1 : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x1xf32>
// CHECK-NOT:     ccl.all_gather
// CHECK-NOT:     ccl.all_reduce
func.func @conv_input_feature_split_scatters(%a: tensor<2x6x6x8xf32>, %k: tensor<3x3x8x4xf32>) -> tensor<2x4x4x4xf32> {
  %r = tpu.replicate([%a] as %x: tensor<2x6x6x8xf32>, [%k] as %w: tensor<3x3x8x4xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,1,1,4]<=[4]}> : tensor<2x6x6x8xf32>
    %wc = tpu.sharding_constraint %w to #tpu.sharding<{devices=[1,1,4,1]<=[4]}> : tensor<3x3x8x4xf32>
    %y = hlo.convolution(%xs, %wc) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x6x6x8xf32>, tensor<3x3x8x4xf32>) -> tensor<2x4x4x4xf32>
    %ys = tpu.sharding_constraint %y to #tpu.sharding<{devices=[1,1,1,4]<=[4]}> : tensor<2x4x4x4xf32>
    %z = hlo.tanh %ys : tensor<2x4x4x4xf32>
    tpu.yield %z : tensor<2x4x4x4xf32>
  }
  func.return %r : tensor<2x4x4x4xf32>
}

// -----

// A 2x2 max pool with stride 2 over tiles of whole windows, and its gradient
// (select_and_scatter): local.
// CHECK-LABEL: func @max_pool_tiles_of_whole_windows_are_local
// CHECK:         %p = hlo.reduce_window(%x init : %ninf) applies max {{.*}} : (tensor<2x4x4x3xf32>, tensor<f32>) -> tensor<2x2x2x3xf32>
// CHECK-NEXT:    %g = hlo.select_and_scatter(%x, %p init : %z) {{.*}} : (tensor<2x4x4x3xf32>, tensor<2x2x2x3xf32>, tensor<f32>) -> tensor<2x4x4x3xf32>
// CHECK-NEXT:    tpu.yield %g : tensor<2x4x4x3xf32>
// CHECK-NOT:     ccl.
func.func @max_pool_tiles_of_whole_windows_are_local(%a: tensor<2x8x8x3xf32>, %i: tensor<f32>, %zero: tensor<f32>) -> tensor<2x8x8x3xf32> {
  %r = tpu.replicate([%a] as %x: tensor<2x8x8x3xf32>, [%i] as %ninf: tensor<f32>, [%zero] as %z: tensor<f32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,2,2,1]<=[4]}> : tensor<2x8x8x3xf32>
    %p = hlo.reduce_window(%xs init : %ninf) applies max dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<0> : tensor<4x2xi64> : (tensor<2x8x8x3xf32>, tensor<f32>) -> tensor<2x4x4x3xf32>
    %g = hlo.select_and_scatter(%xs, %p init : %z) select "GE" dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], pad = dense<0> : tensor<4x2xi64> : (tensor<2x8x8x3xf32>, tensor<2x4x4x3xf32>, tensor<f32>) -> tensor<2x8x8x3xf32>
    tpu.yield %g : tensor<2x8x8x3xf32>
  }
  func.return %r : tensor<2x8x8x3xf32>
}

// -----

// A 3x3 SAME max pool with stride 1 over rows split 4 ways: one row from
// each neighbour (1x1x4x2, 64 bytes per core); -inf (the init value) outside
// the image.
// CHECK-LABEL: func @same_pool_exchanges_halo
// CHECK:         ccl.collective_permute %{{.*}} pairs = dense<{{\[\[}}0, 1], [1, 2], [2, 3{{\]\]}}> : tensor<3x2xi64> channel 1 : tensor<1x1x4x2xf32>
// CHECK:         ccl.collective_permute %{{.*}} pairs = dense<{{\[\[}}1, 0], [2, 1], [3, 2{{\]\]}}> : tensor<3x2xi64> channel 2 : tensor<1x1x4x2xf32>
// CHECK:         %[[W:.*]] = hlo.select {{.*}} -> tensor<1x4x4x2xf32>
// CHECK-NEXT:    %p = hlo.reduce_window(%[[W]] init : %ninf) applies max {{.*}} pad = dense<{{\[\[}}0, 0], [0, 0], [1, 1], [0, 0{{\]\]}}> : tensor<4x2xi64> : (tensor<1x4x4x2xf32>, tensor<f32>) -> tensor<1x2x4x2xf32>
// CHECK-NOT:     ccl.all_gather
func.func @same_pool_exchanges_halo(%a: tensor<1x8x4x2xf32>, %i: tensor<f32>) -> tensor<1x8x4x2xf32> {
  %r = tpu.replicate([%a] as %x: tensor<1x8x4x2xf32>, [%i] as %ninf: tensor<f32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,4,1,1]<=[4]}> : tensor<1x8x4x2xf32>
    %p = hlo.reduce_window(%xs init : %ninf) applies max dims = [1, 3, 3, 1], strides = [1, 1, 1, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<[[0, 0], [1, 1], [1, 1], [0, 0]]> : tensor<4x2xi64> : (tensor<1x8x4x2xf32>, tensor<f32>) -> tensor<1x8x4x2xf32>
    tpu.yield %p : tensor<1x8x4x2xf32>
  }
  func.return %r : tensor<1x8x4x2xf32>
}

// -----

// The kernel gradient of a spatially split convolution: the cotangent (the
// kernel operand here) is split like the image, the 3x3 result is not.  Each
// core convolves its haloed image window with its cotangent tile and an
// all_reduce sums the partial kernels: no all_gather of the cotangent
// (240 bytes of halo + 648 of all_reduce = 888 bytes per core).
// CHECK-LABEL: func @kernel_gradient_sums_partials
// CHECK-COUNT-4: ccl.collective_permute
// CHECK:         %gw_partial = hlo.convolution(%{{.*}}, %ct) {{.*}} : (tensor<2x6x6x3xf32>, tensor<2x4x4x4xf32>) -> tensor<3x3x3x4xf32>
// CHECK-NEXT:    %gw = ccl.all_reduce %gw_partial applies add groups = dense<{{\[\[}}0, 1, 2, 3{{\]\]}}> : tensor<1x4xi64> channel 5 : tensor<3x3x3x4xf32>
// CHECK-NOT:     ccl.all_gather
func.func @kernel_gradient_sums_partials(%a: tensor<2x8x8x3xf32>, %c: tensor<2x8x8x4xf32>) -> tensor<3x3x3x4xf32> {
  %r = tpu.replicate([%a] as %x: tensor<2x8x8x3xf32>, [%c] as %ct: tensor<2x8x8x4xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[1,2,2,1]<=[4]}> : tensor<2x8x8x3xf32>
    %cs = tpu.sharding_constraint %ct to #tpu.sharding<{devices=[1,2,2,1]<=[4]}> : tensor<2x8x8x4xf32>
    %gw = hlo.convolution(%xs, %cs) dim_numbers = [f, 0, 1, b]x[i, 0, 1, o]->[0, 1, b, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x8x8x3xf32>, tensor<2x8x8x4xf32>) -> tensor<3x3x3x4xf32>
    tpu.yield %gw : tensor<3x3x3x4xf32>
  }
  func.return %r : tensor<3x3x3x4xf32>
}

// -----

// A pool of a whole (replicated) operand whose result is split on the
// channels, a dimension no window crosses (size 1, stride 1): each core
// cuts its channel tile of the operand locally and pools it; nothing moves
// and the result is the local tile (the fuzzer's avg_pool3d whose result
// split_to_logical_devices split on its channels).
// CHECK-LABEL: func @pool_split_on_uncrossed_dim_is_local
// CHECK:         %[[T:.*]] = hlo.dynamic_slice %x[{{.*}}] sizes = [1, 4, 4, 2] : (tensor<1x4x4x4xf32>, {{.*}}) -> tensor<1x4x4x2xf32>
// CHECK:         %p = hlo.reduce_window(%[[T]] init : %zero) applies add {{.*}} : (tensor<1x4x4x2xf32>, tensor<f32>) -> tensor<1x2x2x2xf32>
// CHECK-NEXT:    tpu.yield %p : tensor<1x2x2x2xf32>
// CHECK-NOT:     ccl.
func.func @pool_split_on_uncrossed_dim_is_local(%a: tensor<1x4x4x4xf32>, %i: tensor<f32>) -> tensor<1x2x2x4xf32> {
  %r = tpu.replicate([%a] as %x: tensor<1x4x4x4xf32>, [%i] as %zero: tensor<f32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xr = tpu.sharding_constraint %x to #tpu.sharding<{replicated}> : tensor<1x4x4x4xf32>
    %p = hlo.reduce_window(%xr init : %zero) applies add dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<0> : tensor<4x2xi64> : (tensor<1x4x4x4xf32>, tensor<f32>) -> tensor<1x2x2x4xf32>
    %ps = tpu.sharding_constraint %p to #tpu.sharding<{devices=[1,1,1,2]<=[2]}> : tensor<1x2x2x4xf32>
    tpu.yield %ps : tensor<1x2x2x4xf32>
  }
  func.return %r : tensor<1x2x2x4xf32>
}
