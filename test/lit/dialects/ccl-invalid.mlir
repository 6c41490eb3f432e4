// The verifier of every ccl op: one broken rule per case, and its message.
// xDSL's --verify-diagnostics prints the diagnostic and goes on with the next
// case; FileCheck matches the messages in order.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: result 'result' at position 0 does not verify:
// CHECK-NEXT: attribute tensor<4xf32> expected from variable 'T', but got tensor<4xf64>
func.func @all_reduce_type_mismatch(%x: tensor<4xf32>) {
  %0 = "ccl.all_reduce"(%x) <{computation = #hlo<reduction add>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> : (tensor<4xf32>) -> tensor<4xf64>
  func.return
}

// -----

// CHECK: 'ccl.all_reduce' op replica_groups {{\[\[}}0, 1], [1, 2{{\]\]}} lists replicas [1] more than once
func.func @all_reduce_repeated_replica(%x: tensor<4xf32>) {
  %0 = ccl.all_reduce %x applies add groups = dense<[[0, 1], [1, 2]]> : tensor<2x2xi64> : tensor<4xf32>
  func.return
}

// -----

// CHECK: 'ccl.all_reduce' op replica_groups {{\[\[}}0, -1{{\]\]}} must hold non-negative replica ids
func.func @all_reduce_negative_replica(%x: tensor<4xf32>) {
  %0 = ccl.all_reduce %x applies add groups = dense<[[0, -1]]> : tensor<1x2xi64> : tensor<4xf32>
  func.return
}

// -----

// CHECK: 'ccl.all_reduce' op replica_groups [] must be a non-empty list of non-empty groups
func.func @all_reduce_empty_groups(%x: tensor<4xf32>) {
  %0 = ccl.all_reduce %x applies add groups = dense<> : tensor<0x2xi64> : tensor<4xf32>
  func.return
}

// -----

// CHECK: 'ccl.all_reduce' op needs a numeric tensor, got string[]
func.func @all_reduce_strings(%x: tensor<!hlo.string>) {
  %0 = ccl.all_reduce %x applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> : tensor<!hlo.string>
  func.return
}

// -----

// CHECK: 'ccl.all_gather' op all_gather_dim 2 out of range for float32[4x2]
func.func @all_gather_dim_out_of_range(%x: tensor<4x2xf32>) {
  %0 = ccl.all_gather %x dim = 2 groups = dense<[[0, 1]]> : tensor<1x2xi64> : (tensor<4x2xf32>) -> tensor<4x4xf32>
  func.return
}

// -----

// CHECK: 'ccl.all_gather' op inferred result type(s) (tensor<8x2xf32>) do not match the declared (tensor<4x4xf32>)
func.func @all_gather_result_shape(%x: tensor<4x2xf32>) {
  %0 = ccl.all_gather %x dim = 0 groups = dense<[[0, 1]]> : tensor<1x2xi64> : (tensor<4x2xf32>) -> tensor<4x4xf32>
  func.return
}

// -----

// CHECK: 'ccl.reduce_scatter' op dimension 0 of float32[3x2] does not divide into 2 blocks
func.func @reduce_scatter_not_divisible(%x: tensor<3x2xf32>) {
  %0 = ccl.reduce_scatter %x applies add dim = 0 groups = dense<[[0, 1]]> : tensor<1x2xi64> : (tensor<3x2xf32>) -> tensor<1x2xf32>
  func.return
}

// -----

// CHECK: 'ccl.all_to_all' op dimension 0 of float32[3x2] does not divide into 2 blocks
func.func @all_to_all_not_divisible(%x: tensor<3x2xf32>) {
  %0 = ccl.all_to_all %x split = 0 concat = 1 groups = dense<[[0, 1]]> : tensor<1x2xi64> : (tensor<3x2xf32>) -> tensor<1x4xf32>
  func.return
}

// -----

// CHECK: 'ccl.all_to_all' op concat_dimension 3 out of range for float32[4x2]
func.func @all_to_all_concat_out_of_range(%x: tensor<4x2xf32>) {
  %0 = ccl.all_to_all %x split = 0 concat = 3 groups = dense<[[0, 1]]> : tensor<1x2xi64> : (tensor<4x2xf32>) -> tensor<2x4xf32>
  func.return
}

// -----

// CHECK: 'ccl.collective_permute' op source_target_pairs must hold pairs (tensor<Nx2xi64>: N [source, target] pairs), got tensor<1x3xi64>
func.func @collective_permute_not_pairs(%x: tensor<4xf32>) {
  %0 = ccl.collective_permute %x pairs = dense<[[0, 1, 2]]> : tensor<1x3xi64> : tensor<4xf32>
  func.return
}

// -----

// CHECK: 'ccl.collective_permute' op source_target_pairs [(0, 1), (2, 1)] repeat a target
func.func @collective_permute_repeated_target(%x: tensor<4xf32>) {
  %0 = ccl.collective_permute %x pairs = dense<[[0, 1], [2, 1]]> : tensor<2x2xi64> : tensor<4xf32>
  func.return
}

// -----

// Inside a tpu.replicate the ids are the runtime's participants: replica
// r, logical core c is r * C + c; groups cover each exactly once.
// CHECK: 'ccl.all_reduce' op replica_groups {{\[\[}}0, 5{{\]\]}} misses replicas [1] and names replicas [5] that do not exist; it must cover each of the 2 replicas exactly once (the enclosing tpu.replicate has n = 2)
func.func @all_reduce_replica_out_of_range(%a: tensor<4xf32>, %b: tensor<4xf32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<4xf32>) {n = 2 : i64} {
    %s = ccl.all_reduce %x applies add groups = dense<[[0, 5]]> : tensor<1x2xi64> : tensor<4xf32>
    tpu.yield %s : tensor<4xf32>
  }
  func.return
}

// -----

// CHECK: 'ccl.all_gather' op replica_groups {{\[\[}}0, 1{{\]\]}} misses participants [2, 3]; it must cover each of the 4 participants exactly once (the enclosing tpu.replicate runs 2 replicas x 2 logical cores, participants r * 2 + c)
func.func @all_gather_misses_participants(%a: tensor<4xf32>, %b: tensor<4xf32>) {
  tpu.replicate([%a, %b] as %x: tensor<4xf32>) {n = 2 : i64, num_cores_per_replica = 2 : i64} {
    %s = ccl.all_gather %x dim = 0 groups = dense<[[0, 1]]> : tensor<1x2xi64> : (tensor<4xf32>) -> tensor<8xf32>
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'ccl.all_reduce' op replica_groups must hold integer ids (tensor<GxSxi64>: G groups of S ids), got element type f32
func.func @all_reduce_float_groups(%x: tensor<4xf32>) {
  %0 = ccl.all_reduce %x applies add groups = dense<[[0.0, 1.0]]> : tensor<1x2xf32> : tensor<4xf32>
  func.return
}

// -----

// CHECK: 'ccl.reduce_scatter' op replica_groups must hold integer ids (tensor<GxSxi64>: G groups of S ids), got element type i1
func.func @reduce_scatter_bool_groups(%x: tensor<4xf32>) {
  %0 = ccl.reduce_scatter %x applies add dim = 0 groups = dense<[[true, false]]> : tensor<1x2xi1> : (tensor<4xf32>) -> tensor<2xf32>
  func.return
}

// -----

// CHECK: 'ccl.collective_permute' op source_target_pairs {{\[\[}}1, 2{{\]\]}} name replicas out of range [0, 2) (the enclosing tpu.replicate has n = 2)
func.func @collective_permute_out_of_range(%a: tensor<4xf32>, %b: tensor<4xf32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<4xf32>) {n = 2 : i64} {
    %s = ccl.collective_permute %x pairs = dense<[[0, 1], [1, 2]]> : tensor<2x2xi64> : tensor<4xf32>
    tpu.yield %s : tensor<4xf32>
  }
  func.return
}

// -----

// CHECK: 'ccl.collective_permute' op source_target_pairs must hold integer ids (tensor<Nx2xi64>: N [source, target] pairs), got element type f64
func.func @collective_permute_float_pairs(%x: tensor<4xf32>) {
  %0 = ccl.collective_permute %x pairs = dense<[[0.0, 1.0]]> : tensor<1x2xf64> : tensor<4xf32>
  func.return
}

// -----

// CHECK: 'ccl.all_reduce' op is in outside_compilation cluster '0', which runs on the host; collectives run between the device workers
func.func @all_reduce_on_the_host(%a: tensor<4xf32>) {
  tpu.replicate([%a] as %x: tensor<4xf32>) {n = 1 : i64} {
    tpu.outside_compilation "0" {
      %s = ccl.all_reduce %x applies add groups = dense<[[0]]> : tensor<1x1xi64> : tensor<4xf32>
      tpu.yield
    }
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'ccl.all_to_all' op is in the host function of outside_compilation cluster '1'; collectives run between the device workers
func.func @all_to_all_in_a_host_function(%x: tensor<4xf32>) attributes {tpu.outside_compilation_cluster = "1"} {
  %0 = ccl.all_to_all %x split = 0 concat = 0 groups = dense<[[0]]> : tensor<1x1xi64> : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// StableHLO's and/or take integers or booleans (issue 25: a float all_reduce
// applying them verified, and no runtime kernel could run it).
// CHECK: 'ccl.all_reduce' op applies and to integer or boolean tensors only, got float32[4]
func.func @all_reduce_and_of_floats(%x: tensor<4xf32>) {
  %0 = ccl.all_reduce %x applies and groups = dense<[[0, 1]]> : tensor<1x2xi64> : tensor<4xf32>
  func.return
}

// -----

// CHECK: 'ccl.reduce_scatter' op applies or to integer or boolean tensors only, got float64[4]
func.func @reduce_scatter_or_of_floats(%x: tensor<4xf64>) {
  %0 = ccl.reduce_scatter %x applies or dim = 0 groups = dense<[[0, 1]]> : tensor<1x2xi64> : (tensor<4xf64>) -> tensor<2xf64>
  func.return
}
