// ccl-combine-all-reduce (XLA's AllReduceCombiner): independent all-reduces
// of one block with the same replica_groups, reduction and element type
// become one all-reduce of their flattened, concatenated operands, sliced and
// reshaped back, up to threshold-bytes.
// RUN: xtpu-opt %s --split-input-file -p ccl-combine-all-reduce | filecheck %s
// RUN: xtpu-opt %s --split-input-file -p 'ccl-combine-all-reduce{threshold-bytes=32}' | filecheck %s --check-prefix=SMALL
// RUN: not xtpu-opt %s -p 'ccl-combine-all-reduce{threshold-bytes=0}' 2>&1 | filecheck %s --check-prefix=BADOPT
// BADOPT: pass 'ccl-combine-all-reduce': threshold-bytes must be positive, got 0

// The combined all-reduce sits at the last member, with the first member's
// channel; %u, which used the first result, moves after it.
// CHECK-LABEL: func @three_shapes
// CHECK:         %[[X:.*]] = hlo.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
// CHECK-NEXT:    %[[Z:.*]] = hlo.reshape %z : (tensor<f32>) -> tensor<1xf32>
// CHECK-NEXT:    %[[CAT:.*]] = hlo.concatenate %[[X]], %y, %[[Z]] dim = 0 : (tensor<6xf32>, tensor<4xf32>, tensor<1xf32>) -> tensor<11xf32>
// CHECK-NEXT:    %[[ALL:.*]] = ccl.all_reduce %[[CAT]] applies add groups = dense<{{\[\[}}0, 1{{\]\]}}> : tensor<1x2xi64> channel 1 : tensor<11xf32>
// CHECK-NEXT:    %[[A:.*]] = hlo.slice %[[ALL]], start = [0], limit = [6], strides = [1] : (tensor<11xf32>) -> tensor<6xf32>
// CHECK-NEXT:    %s1 = hlo.reshape %[[A]] : (tensor<6xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %s2 = hlo.slice %[[ALL]], start = [6], limit = [10], strides = [1] : (tensor<11xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[C:.*]] = hlo.slice %[[ALL]], start = [10], limit = [11], strides = [1] : (tensor<11xf32>) -> tensor<1xf32>
// CHECK-NEXT:    %s3 = hlo.reshape %[[C]] : (tensor<1xf32>) -> tensor<f32>
// CHECK-NEXT:    %u = hlo.multiply %s1, %s1
// CHECK-NEXT:    tpu.yield %u, %s2, %s3
// With 32 bytes at most, %x (24 bytes) stays alone; %y and %z (20) combine.
// SMALL-LABEL: func @three_shapes
// SMALL:         %s1 = ccl.all_reduce %x
// SMALL:         ccl.all_reduce {{.*}} channel 2 : tensor<5xf32>
func.func @three_shapes(%a: tensor<2x3xf32>, %b: tensor<4xf32>, %c: tensor<f32>) {
  %r:6 = tpu.replicate([%a, %a] as %x: tensor<2x3xf32>, [%b, %b] as %y: tensor<4xf32>, [%c, %c] as %z: tensor<f32>) {n = 2 : i64} {
    %s1 = ccl.all_reduce %x applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 1 : tensor<2x3xf32>
    %u = hlo.multiply %s1, %s1 : tensor<2x3xf32>
    %s2 = ccl.all_reduce %y applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 2 : tensor<4xf32>
    %s3 = ccl.all_reduce %z applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 3 : tensor<f32>
    tpu.yield %u, %s2, %s3 : tensor<2x3xf32>, tensor<4xf32>, tensor<f32>
  }
  func.return
}

// -----

// %s2 depends on %s1 (through %u): they stay apart; %s3 joins %s1.
// CHECK-LABEL: func @dependent_all_reduce_stays_apart
// CHECK:         %[[CAT:.*]] = hlo.concatenate %x, %y dim = 0
// CHECK-NEXT:    %[[ALL:.*]] = ccl.all_reduce %[[CAT]] applies add {{.*}} channel 1 : tensor<8xf32>
// CHECK:         %u = hlo.add
// CHECK-NEXT:    %s2 = ccl.all_reduce %u applies add {{.*}} channel 2 : tensor<4xf32>
// CHECK-NEXT:    tpu.yield
func.func @dependent_all_reduce_stays_apart(%a: tensor<4xf32>) {
  %r:4 = tpu.replicate([%a, %a] as %x: tensor<4xf32>, [%a, %a] as %y: tensor<4xf32>) {n = 2 : i64} {
    %s1 = ccl.all_reduce %x applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 1 : tensor<4xf32>
    %u = hlo.add %s1, %x : tensor<4xf32>
    %s3 = ccl.all_reduce %y applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 3 : tensor<4xf32>
    %s2 = ccl.all_reduce %u applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 2 : tensor<4xf32>
    tpu.yield %s2, %s3 : tensor<4xf32>, tensor<4xf32>
  }
  func.return
}

// -----

// Different groups, reductions or element types are different collectives.
// CHECK-LABEL: func @different_keys_stay_apart
// CHECK:         %s1 = ccl.all_reduce %x applies add groups = dense<{{\[\[}}0, 1], [2, 3{{\]\]}}>
// CHECK-NEXT:    %s2 = ccl.all_reduce %x applies add groups = dense<{{\[\[}}0, 2], [1, 3{{\]\]}}>
// CHECK-NEXT:    %s3 = ccl.all_reduce %x applies max groups = dense<{{\[\[}}0, 1], [2, 3{{\]\]}}>
// CHECK-NEXT:    %s4 = ccl.all_reduce %i applies add groups = dense<{{\[\[}}0, 1], [2, 3{{\]\]}}>
// CHECK-NEXT:    tpu.yield
func.func @different_keys_stay_apart(%a: tensor<4xf32>, %b: tensor<4xi32>) {
  %r:16 = tpu.replicate([%a, %a, %a, %a] as %x: tensor<4xf32>, [%b, %b, %b, %b] as %i: tensor<4xi32>) {n = 4 : i64} {
    %s1 = ccl.all_reduce %x applies add groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64> : tensor<4xf32>
    %s2 = ccl.all_reduce %x applies add groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64> : tensor<4xf32>
    %s3 = ccl.all_reduce %x applies max groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64> : tensor<4xf32>
    %s4 = ccl.all_reduce %i applies add groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64> : tensor<4xi32>
    tpu.yield %s1, %s2, %s3, %s4 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>
  }
  func.return
}

// -----

// A side effect (here a message to the host) is a barrier: the host may
// answer %h only after it got %s1, so nothing moves across the send.
// CHECK-LABEL: func @no_combining_across_a_host_channel
// CHECK:         %s1 = ccl.all_reduce %x
// CHECK-NEXT:    tpu.send_to_host "k"(%s1 : tensor<4xf32>)
// CHECK-NEXT:    %h = tpu.recv_from_host "r" : tensor<4xf32>
// CHECK-NEXT:    %s2 = ccl.all_reduce %y
func.func @no_combining_across_a_host_channel(%a: tensor<4xf32>) {
  %r:4 = tpu.replicate([%a, %a] as %x: tensor<4xf32>, [%a, %a] as %y: tensor<4xf32>) {n = 2 : i64} {
    %s1 = ccl.all_reduce %x applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> : tensor<4xf32>
    tpu.send_to_host "k"(%s1 : tensor<4xf32>)
    %h = tpu.recv_from_host "r" : tensor<4xf32>
    %s2 = ccl.all_reduce %y applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> : tensor<4xf32>
    %o = hlo.add %s2, %h : tensor<4xf32>
    tpu.yield %s1, %o : tensor<4xf32>, tensor<4xf32>
  }
  func.return
}

// -----

// In a replica split over logical cores, all-reduces over replica ids come
// before tpu-spmd-partition (their operands may be sharded): left alone.
// CHECK-LABEL: func @replica_groups_before_partitioning
// CHECK:         %s1 = ccl.all_reduce %x applies add groups = dense<{{\[\[}}0, 1{{\]\]}}>
// CHECK-NEXT:    %s2 = ccl.all_reduce %y applies add groups = dense<{{\[\[}}0, 1{{\]\]}}>
func.func @replica_groups_before_partitioning(%a: tensor<4xf32>) {
  %r:4 = tpu.replicate([%a, %a] as %x: tensor<4xf32>, [%a, %a] as %y: tensor<4xf32>) {n = 2 : i64, num_cores_per_replica = 2 : i64} {
    %s1 = ccl.all_reduce %x applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> : tensor<4xf32>
    %s2 = ccl.all_reduce %y applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> : tensor<4xf32>
    tpu.yield %s1, %s2 : tensor<4xf32>, tensor<4xf32>
  }
  func.return
}

// -----

// The done-when case of issue 12: a step's 50 small gradient all-reduces
// (the shapes of biases and small kernels, 4960 floats in all) run as one.
// CHECK-LABEL: func @fifty_gradients
// CHECK:         %[[CAT:.*]] = hlo.concatenate {{.*}} dim = 0 : ({{.*}}) -> tensor<4960xf32>
// CHECK-NEXT:    %[[ALL:.*]] = ccl.all_reduce %[[CAT]] applies add groups = dense<{{\[\[}}0, 1{{\]\]}}> : tensor<1x2xi64> channel 1 : tensor<4960xf32>
// CHECK-NOT:     ccl.all_reduce
// CHECK:         %s49 = hlo.reshape
// CHECK-NEXT:    tpu.yield %s0, %s1,
func.func @fifty_gradients(%a0: tensor<16xf32>, %a1: tensor<16x16xf32>, %a2: tensor<32xf32>, %a3: tensor<8x16xf32>, %a4: tensor<4x4x4xf32>, %a5: tensor<16xf32>, %a6: tensor<16x16xf32>, %a7: tensor<32xf32>, %a8: tensor<8x16xf32>, %a9: tensor<4x4x4xf32>, %a10: tensor<16xf32>, %a11: tensor<16x16xf32>, %a12: tensor<32xf32>, %a13: tensor<8x16xf32>, %a14: tensor<4x4x4xf32>, %a15: tensor<16xf32>, %a16: tensor<16x16xf32>, %a17: tensor<32xf32>, %a18: tensor<8x16xf32>, %a19: tensor<4x4x4xf32>, %a20: tensor<16xf32>, %a21: tensor<16x16xf32>, %a22: tensor<32xf32>, %a23: tensor<8x16xf32>, %a24: tensor<4x4x4xf32>, %a25: tensor<16xf32>, %a26: tensor<16x16xf32>, %a27: tensor<32xf32>, %a28: tensor<8x16xf32>, %a29: tensor<4x4x4xf32>, %a30: tensor<16xf32>, %a31: tensor<16x16xf32>, %a32: tensor<32xf32>, %a33: tensor<8x16xf32>, %a34: tensor<4x4x4xf32>, %a35: tensor<16xf32>, %a36: tensor<16x16xf32>, %a37: tensor<32xf32>, %a38: tensor<8x16xf32>, %a39: tensor<4x4x4xf32>, %a40: tensor<16xf32>, %a41: tensor<16x16xf32>, %a42: tensor<32xf32>, %a43: tensor<8x16xf32>, %a44: tensor<4x4x4xf32>, %a45: tensor<16xf32>, %a46: tensor<16x16xf32>, %a47: tensor<32xf32>, %a48: tensor<8x16xf32>, %a49: tensor<4x4x4xf32>) {
  %r:100 = tpu.replicate([%a0, %a0] as %g0: tensor<16xf32>, [%a1, %a1] as %g1: tensor<16x16xf32>, [%a2, %a2] as %g2: tensor<32xf32>, [%a3, %a3] as %g3: tensor<8x16xf32>, [%a4, %a4] as %g4: tensor<4x4x4xf32>, [%a5, %a5] as %g5: tensor<16xf32>, [%a6, %a6] as %g6: tensor<16x16xf32>, [%a7, %a7] as %g7: tensor<32xf32>, [%a8, %a8] as %g8: tensor<8x16xf32>, [%a9, %a9] as %g9: tensor<4x4x4xf32>, [%a10, %a10] as %g10: tensor<16xf32>, [%a11, %a11] as %g11: tensor<16x16xf32>, [%a12, %a12] as %g12: tensor<32xf32>, [%a13, %a13] as %g13: tensor<8x16xf32>, [%a14, %a14] as %g14: tensor<4x4x4xf32>, [%a15, %a15] as %g15: tensor<16xf32>, [%a16, %a16] as %g16: tensor<16x16xf32>, [%a17, %a17] as %g17: tensor<32xf32>, [%a18, %a18] as %g18: tensor<8x16xf32>, [%a19, %a19] as %g19: tensor<4x4x4xf32>, [%a20, %a20] as %g20: tensor<16xf32>, [%a21, %a21] as %g21: tensor<16x16xf32>, [%a22, %a22] as %g22: tensor<32xf32>, [%a23, %a23] as %g23: tensor<8x16xf32>, [%a24, %a24] as %g24: tensor<4x4x4xf32>, [%a25, %a25] as %g25: tensor<16xf32>, [%a26, %a26] as %g26: tensor<16x16xf32>, [%a27, %a27] as %g27: tensor<32xf32>, [%a28, %a28] as %g28: tensor<8x16xf32>, [%a29, %a29] as %g29: tensor<4x4x4xf32>, [%a30, %a30] as %g30: tensor<16xf32>, [%a31, %a31] as %g31: tensor<16x16xf32>, [%a32, %a32] as %g32: tensor<32xf32>, [%a33, %a33] as %g33: tensor<8x16xf32>, [%a34, %a34] as %g34: tensor<4x4x4xf32>, [%a35, %a35] as %g35: tensor<16xf32>, [%a36, %a36] as %g36: tensor<16x16xf32>, [%a37, %a37] as %g37: tensor<32xf32>, [%a38, %a38] as %g38: tensor<8x16xf32>, [%a39, %a39] as %g39: tensor<4x4x4xf32>, [%a40, %a40] as %g40: tensor<16xf32>, [%a41, %a41] as %g41: tensor<16x16xf32>, [%a42, %a42] as %g42: tensor<32xf32>, [%a43, %a43] as %g43: tensor<8x16xf32>, [%a44, %a44] as %g44: tensor<4x4x4xf32>, [%a45, %a45] as %g45: tensor<16xf32>, [%a46, %a46] as %g46: tensor<16x16xf32>, [%a47, %a47] as %g47: tensor<32xf32>, [%a48, %a48] as %g48: tensor<8x16xf32>, [%a49, %a49] as %g49: tensor<4x4x4xf32>) {n = 2 : i64} {
    %s0 = ccl.all_reduce %g0 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 1 : tensor<16xf32>
    %s1 = ccl.all_reduce %g1 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 2 : tensor<16x16xf32>
    %s2 = ccl.all_reduce %g2 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 3 : tensor<32xf32>
    %s3 = ccl.all_reduce %g3 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 4 : tensor<8x16xf32>
    %s4 = ccl.all_reduce %g4 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 5 : tensor<4x4x4xf32>
    %s5 = ccl.all_reduce %g5 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 6 : tensor<16xf32>
    %s6 = ccl.all_reduce %g6 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 7 : tensor<16x16xf32>
    %s7 = ccl.all_reduce %g7 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 8 : tensor<32xf32>
    %s8 = ccl.all_reduce %g8 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 9 : tensor<8x16xf32>
    %s9 = ccl.all_reduce %g9 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 10 : tensor<4x4x4xf32>
    %s10 = ccl.all_reduce %g10 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 11 : tensor<16xf32>
    %s11 = ccl.all_reduce %g11 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 12 : tensor<16x16xf32>
    %s12 = ccl.all_reduce %g12 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 13 : tensor<32xf32>
    %s13 = ccl.all_reduce %g13 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 14 : tensor<8x16xf32>
    %s14 = ccl.all_reduce %g14 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 15 : tensor<4x4x4xf32>
    %s15 = ccl.all_reduce %g15 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 16 : tensor<16xf32>
    %s16 = ccl.all_reduce %g16 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 17 : tensor<16x16xf32>
    %s17 = ccl.all_reduce %g17 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 18 : tensor<32xf32>
    %s18 = ccl.all_reduce %g18 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 19 : tensor<8x16xf32>
    %s19 = ccl.all_reduce %g19 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 20 : tensor<4x4x4xf32>
    %s20 = ccl.all_reduce %g20 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 21 : tensor<16xf32>
    %s21 = ccl.all_reduce %g21 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 22 : tensor<16x16xf32>
    %s22 = ccl.all_reduce %g22 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 23 : tensor<32xf32>
    %s23 = ccl.all_reduce %g23 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 24 : tensor<8x16xf32>
    %s24 = ccl.all_reduce %g24 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 25 : tensor<4x4x4xf32>
    %s25 = ccl.all_reduce %g25 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 26 : tensor<16xf32>
    %s26 = ccl.all_reduce %g26 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 27 : tensor<16x16xf32>
    %s27 = ccl.all_reduce %g27 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 28 : tensor<32xf32>
    %s28 = ccl.all_reduce %g28 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 29 : tensor<8x16xf32>
    %s29 = ccl.all_reduce %g29 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 30 : tensor<4x4x4xf32>
    %s30 = ccl.all_reduce %g30 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 31 : tensor<16xf32>
    %s31 = ccl.all_reduce %g31 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 32 : tensor<16x16xf32>
    %s32 = ccl.all_reduce %g32 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 33 : tensor<32xf32>
    %s33 = ccl.all_reduce %g33 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 34 : tensor<8x16xf32>
    %s34 = ccl.all_reduce %g34 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 35 : tensor<4x4x4xf32>
    %s35 = ccl.all_reduce %g35 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 36 : tensor<16xf32>
    %s36 = ccl.all_reduce %g36 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 37 : tensor<16x16xf32>
    %s37 = ccl.all_reduce %g37 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 38 : tensor<32xf32>
    %s38 = ccl.all_reduce %g38 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 39 : tensor<8x16xf32>
    %s39 = ccl.all_reduce %g39 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 40 : tensor<4x4x4xf32>
    %s40 = ccl.all_reduce %g40 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 41 : tensor<16xf32>
    %s41 = ccl.all_reduce %g41 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 42 : tensor<16x16xf32>
    %s42 = ccl.all_reduce %g42 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 43 : tensor<32xf32>
    %s43 = ccl.all_reduce %g43 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 44 : tensor<8x16xf32>
    %s44 = ccl.all_reduce %g44 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 45 : tensor<4x4x4xf32>
    %s45 = ccl.all_reduce %g45 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 46 : tensor<16xf32>
    %s46 = ccl.all_reduce %g46 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 47 : tensor<16x16xf32>
    %s47 = ccl.all_reduce %g47 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 48 : tensor<32xf32>
    %s48 = ccl.all_reduce %g48 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 49 : tensor<8x16xf32>
    %s49 = ccl.all_reduce %g49 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 50 : tensor<4x4x4xf32>
    tpu.yield %s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7, %s8, %s9, %s10, %s11, %s12, %s13, %s14, %s15, %s16, %s17, %s18, %s19, %s20, %s21, %s22, %s23, %s24, %s25, %s26, %s27, %s28, %s29, %s30, %s31, %s32, %s33, %s34, %s35, %s36, %s37, %s38, %s39, %s40, %s41, %s42, %s43, %s44, %s45, %s46, %s47, %s48, %s49 : tensor<16xf32>, tensor<16x16xf32>, tensor<32xf32>, tensor<8x16xf32>, tensor<4x4x4xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<32xf32>, tensor<8x16xf32>, tensor<4x4x4xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<32xf32>, tensor<8x16xf32>, tensor<4x4x4xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<32xf32>, tensor<8x16xf32>, tensor<4x4x4xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<32xf32>, tensor<8x16xf32>, tensor<4x4x4xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<32xf32>, tensor<8x16xf32>, tensor<4x4x4xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<32xf32>, tensor<8x16xf32>, tensor<4x4x4xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<32xf32>, tensor<8x16xf32>, tensor<4x4x4xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<32xf32>, tensor<8x16xf32>, tensor<4x4x4xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<32xf32>, tensor<8x16xf32>, tensor<4x4x4xf32>
  }
  func.return
}
