// ccl-decompose-all-reduce: an all-reduce of at least threshold-bytes becomes
// ccl.reduce_scatter + ccl.all_gather over its flattened operand, padded to
// a multiple of the group size and sliced back.
// RUN: xtpu-opt %s --split-input-file -p 'ccl-decompose-all-reduce{threshold-bytes=16}' | filecheck %s
// RUN: not xtpu-opt %s -p 'ccl-decompose-all-reduce{threshold-bytes=-4}' 2>&1 | filecheck %s --check-prefix=BADOPT
// BADOPT: pass 'ccl-decompose-all-reduce': threshold-bytes must be positive, got -4

// 10 elements over groups of 3: padded to 12, 4 per member.
// CHECK-LABEL: func @padded_to_the_group_size
// CHECK:         %[[F:.*]] = hlo.reshape %x : (tensor<2x5xf32>) -> tensor<10xf32>
// CHECK-NEXT:    %[[Z:.*]] = hlo.constant dense<0.000000e+00> : tensor<2xf32>
// CHECK-NEXT:    %[[P:.*]] = hlo.concatenate %[[F]], %[[Z]] dim = 0 : (tensor<10xf32>, tensor<2xf32>) -> tensor<12xf32>
// CHECK-NEXT:    %[[RS:.*]] = ccl.reduce_scatter %[[P]] applies max dim = 0 groups = dense<{{\[\[}}0, 1, 2{{\]\]}}> : tensor<1x3xi64> channel 4 : (tensor<12xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[AG:.*]] = ccl.all_gather %[[RS]] dim = 0 groups = dense<{{\[\[}}0, 1, 2{{\]\]}}> : tensor<1x3xi64> : (tensor<4xf32>) -> tensor<12xf32>
// CHECK-NEXT:    %[[S:.*]] = hlo.slice %[[AG]], start = [0], limit = [10], strides = [1] : (tensor<12xf32>) -> tensor<10xf32>
// CHECK-NEXT:    %[[R:.*]] = hlo.reshape %[[S]] : (tensor<10xf32>) -> tensor<2x5xf32>
// CHECK-NEXT:    tpu.yield %[[R]]
// CHECK-NOT:     ccl.all_reduce
func.func @padded_to_the_group_size(%a: tensor<2x5xf32>) {
  %r:3 = tpu.replicate([%a, %a, %a] as %x: tensor<2x5xf32>) {n = 3 : i64} {
    %s = ccl.all_reduce %x applies max groups = dense<[[0, 1, 2]]> : tensor<1x3xi64> channel 4 : tensor<2x5xf32>
    tpu.yield %s : tensor<2x5xf32>
  }
  func.return
}

// -----

// A 1-D operand that divides by the group size needs no reshape or padding.
// CHECK-LABEL: func @groups_of_two
// CHECK:         %[[RS:.*]] = ccl.reduce_scatter %x applies add dim = 0 groups = dense<{{\[\[}}0, 2], [1, 3{{\]\]}}> : tensor<2x2xi64> : (tensor<8xi32>) -> tensor<4xi32>
// CHECK-NEXT:    %[[AG:.*]] = ccl.all_gather %[[RS]] dim = 0 groups = dense<{{\[\[}}0, 2], [1, 3{{\]\]}}> : tensor<2x2xi64> : (tensor<4xi32>) -> tensor<8xi32>
// CHECK-NEXT:    tpu.yield %[[AG]]
func.func @groups_of_two(%a: tensor<8xi32>) {
  %r:4 = tpu.replicate([%a, %a, %a, %a] as %x: tensor<8xi32>) {n = 4 : i64} {
    %s = ccl.all_reduce %x applies add groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64> : tensor<8xi32>
    tpu.yield %s : tensor<8xi32>
  }
  func.return
}

// -----

// Below the threshold (12 bytes), and groups of one member, stay all-reduces.
// CHECK-LABEL: func @small_or_alone
// CHECK:         %s1 = ccl.all_reduce %x applies add groups = dense<{{\[\[}}0, 1{{\]\]}}>
// CHECK-NEXT:    %s2 = ccl.all_reduce %y applies add groups = dense<{{\[\[}}0], [1{{\]\]}}>
// CHECK-NEXT:    tpu.yield
func.func @small_or_alone(%a: tensor<3xf32>, %b: tensor<64xf32>) {
  %r:4 = tpu.replicate([%a, %a] as %x: tensor<3xf32>, [%b, %b] as %y: tensor<64xf32>) {n = 2 : i64} {
    %s1 = ccl.all_reduce %x applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> : tensor<3xf32>
    %s2 = ccl.all_reduce %y applies add groups = dense<[[0], [1]]> : tensor<2x1xi64> : tensor<64xf32>
    tpu.yield %s1, %s2 : tensor<3xf32>, tensor<64xf32>
  }
  func.return
}
