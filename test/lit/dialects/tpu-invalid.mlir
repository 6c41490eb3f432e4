// The verifier of every tpu op: one broken rule per case, and its message.
// xDSL's --verify-diagnostics prints the diagnostic and goes on with the next
// case; FileCheck matches the messages in order.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'tpu.replicate' op has 3 operands, expected 1 inputs x 2 replicas = 2
func.func @replicate_operand_count(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<f32>) {
  %r:2 = "tpu.replicate"(%a, %b, %c) <{n = 2 : i64}> ({
  ^bb0(%x: tensor<f32>):
    tpu.yield %x : tensor<f32>
  }) : (tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  func.return
}

// -----

// CHECK: 'tpu.replicate' op expects n >= 1 replicas, got 0
func.func @replicate_zero_replicas() {
  tpu.replicate() {n = 0 : i64} {
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'tpu.replicate' op input 0 of replica 1 has type tensor<2xf32>, but the body argument has type tensor<f32>
func.func @replicate_input_type(%a: tensor<f32>, %b: tensor<2xf32>) {
  %r:2 = "tpu.replicate"(%a, %b) <{n = 2 : i64}> ({
  ^bb0(%x: tensor<f32>):
    tpu.yield %x : tensor<f32>
  }) : (tensor<f32>, tensor<2xf32>) -> (tensor<f32>, tensor<f32>)
  func.return
}

// -----

// CHECK: 'tpu.replicate' op has 1 results, expected 1 outputs x 2 replicas = 2
func.func @replicate_result_count(%a: tensor<f32>, %b: tensor<f32>) {
  %r = "tpu.replicate"(%a, %b) <{n = 2 : i64}> ({
  ^bb0(%x: tensor<f32>):
    tpu.yield %x : tensor<f32>
  }) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  func.return
}

// -----

// CHECK: 'tpu.replicate' op result 1 has type tensor<i32>, but the body yields tensor<f32>
func.func @replicate_result_type(%a: tensor<f32>, %b: tensor<f32>) {
  %r:2 = "tpu.replicate"(%a, %b) <{n = 2 : i64}> ({
  ^bb0(%x: tensor<f32>):
    tpu.yield %x : tensor<f32>
  }) : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<i32>)
  func.return
}

// -----

// CHECK: Operation hlo.negate terminates block in single-block region but is not a terminator
func.func @replicate_without_yield(%a: tensor<f32>, %b: tensor<f32>) {
  "tpu.replicate"(%a, %b) <{n = 2 : i64}> ({
  ^bb0(%x: tensor<f32>):
    %y = hlo.negate %x : tensor<f32>
  }) : (tensor<f32>, tensor<f32>) -> ()
  func.return
}

// -----

// CHECK: 'tpu.yield' expects parent op to be one of 'tpu.replicate', 'tpu.outside_compilation'
func.func @yield_outside_replicate(%a: tensor<f32>) {
  tpu.yield %a : tensor<f32>
}

// -----

// CHECK: 'tpu.outside_compilation' op yields (tensor<f32>) but has results (tensor<i32>)
func.func @outside_compilation_yield_types(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %y = tpu.outside_compilation "0" -> (tensor<i32>) {
      tpu.yield %x : tensor<f32>
    }
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'tpu.outside_compilation' op cluster '1' is nested in cluster '0'; outside_compilation clusters cannot nest
func.func @outside_compilation_nested(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    tpu.outside_compilation "0" {
      tpu.outside_compilation "1" {
        hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
        tpu.yield
      }
      tpu.yield
    }
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'tpu.cross_replica_sum' op group_assignment {{\[\[}}0, 1, 2], [3, -1, -1{{\]\]}} must hold non-negative replica ids
func.func @cross_replica_sum_group_sizes(%a: tensor<f32>) {
  %0 = tpu.cross_replica_sum %a groups = dense<[[0, 1, 2], [3, -1, -1]]> : tensor<2x3xi64> : tensor<f32>
  func.return
}

// -----

// CHECK: 'tpu.cross_replica_sum' op group_assignment {{\[\[}}0, 1], [1, 2{{\]\]}} lists replicas [1] more than once
func.func @cross_replica_sum_repeated_replica(%a: tensor<f32>) {
  %0 = tpu.cross_replica_sum %a groups = dense<[[0, 1], [1, 2]]> : tensor<2x2xi64> : tensor<f32>
  func.return
}

// -----

// CHECK: 'tpu.cross_replica_sum' op cross_replica_sum needs a numeric tensor, got bool[2]
func.func @cross_replica_sum_bool(%a: tensor<2xi1>) {
  %0 = tpu.cross_replica_sum %a : tensor<2xi1>
  func.return
}

// -----

// CHECK: 'tpu.replica_id' op inferred result type(s) (tensor<i32>) do not match the declared (tensor<i64>)
func.func @replica_id_type() {
  %0 = tpu.replica_id : tensor<i64>
  func.return
}

// -----

// CHECK: property 'key' expected in operation 'tpu.send_to_host'
func.func @send_to_host_without_key(%a: tensor<f32>) {
  "tpu.send_to_host"(%a) : (tensor<f32>) -> ()
  func.return
}

// -----

// What the runtime relies on, checked by the verifier so that xtpu-opt
// rejects what xtpu-run would (one case per rule).
// CHECK: tpu-invalid.mlir:[[# @LINE + 3]]:5: 'tpu.cross_replica_sum' op group_assignment {{\[\[}}0, 5{{\]\]}} misses replicas [1] and names replicas [5] that do not exist; it must cover each of the 2 replicas exactly once (the enclosing tpu.replicate has n = 2)
func.func @cross_replica_sum_replica_out_of_range(%a: tensor<f32>, %b: tensor<f32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<f32>) {n = 2 : i64} {
    %s = tpu.cross_replica_sum %x groups = dense<[[0, 5]]> : tensor<1x2xi64> : tensor<f32>
    tpu.yield %s : tensor<f32>
  }
  func.return
}

// -----

// CHECK: 'tpu.cross_replica_sum' op group_assignment {{\[\[}}0], [1{{\]\]}} misses replicas [2, 3]; it must cover each of the 4 replicas exactly once (the enclosing tpu.replicate has n = 4)
func.func @cross_replica_sum_groups_miss_replicas(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<f32>, %d: tensor<f32>) {
  %r:4 = tpu.replicate([%a, %b, %c, %d] as %x: tensor<f32>) {n = 4 : i64} {
    %s = tpu.cross_replica_sum %x groups = dense<[[0], [1]]> : tensor<2x1xi64> : tensor<f32>
    tpu.yield %s : tensor<f32>
  }
  func.return
}

// -----

// CHECK: 'tpu.cross_replica_sum' op group_assignment must hold integer ids (tensor<GxSxi64>: G groups of S ids), got element type f32
func.func @cross_replica_sum_float_groups(%a: tensor<f32>, %b: tensor<f32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<f32>) {n = 2 : i64} {
    %s = tpu.cross_replica_sum %x groups = dense<[[0.0, 1.0]]> : tensor<1x2xf32> : tensor<f32>
    tpu.yield %s : tensor<f32>
  }
  func.return
}

// -----

// CHECK: 'tpu.cross_replica_sum' op group_assignment must be a 2-D tensor (tensor<GxSxi64>: G groups of S ids), got tensor<2xi64>
func.func @cross_replica_sum_flat_groups(%a: tensor<f32>) {
  %0 = tpu.cross_replica_sum %a groups = dense<[0, 1]> : tensor<2xi64> : tensor<f32>
  func.return
}

// -----

// CHECK: 'tpu.cross_replica_sum' op is in a host tpu.replicate (placement = "host"); cross_replica_sum can only run on the device
func.func @cross_replica_sum_on_the_host(%a: tensor<f32>) {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64, placement = "host"} {
    %s = tpu.cross_replica_sum %x : tensor<f32>
    tpu.yield %s : tensor<f32>
  }
  func.return
}

// -----

// CHECK: 'tpu.replicate' op is nested in another tpu.replicate; TPU computations cannot be nested
func.func @nested_replicates(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    tpu.replicate([%x] as %y: tensor<f32>) {n = 1 : i64} {
      tpu.yield
    }
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'tpu.replicate' op operand 0 has type tensor<2xi4>: unsupported element type i4
func.func @replicate_of_i4(%a: tensor<2xi4>) {
  tpu.replicate([%a] as %x: tensor<2xi4>) {n = 1 : i64} {
    tpu.yield
  }
  func.return
}

// -----

// CHECK: 'tpu.replicate' op operand 0 has type tensor<?xf32>; the runtime needs static shapes
func.func @replicate_of_dynamic_shape(%a: tensor<?xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<?xf32>) {n = 1 : i64} {
    tpu.yield %x : tensor<?xf32>
  }
  func.return
}

// -----

// CHECK: 'tpu.replicate' op body uses a value defined outside it (operand of 'hlo.add'); pass it in as a replicated input instead
func.func @replicate_body_not_closed(%a: tensor<f32>, %b: tensor<f32>) {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %y = hlo.add %x, %b : tensor<f32>
    tpu.yield %y : tensor<f32>
  }
  func.return
}

// -----

// CHECK: 'tpu.replicate' op has 300 replicas x 300 logical cores, more than the 65536 workers the runtime supports
func.func @too_many_workers() {
  "tpu.replicate"() <{n = 300 : i64, num_cores_per_replica = 300 : i64}> ({
    "tpu.yield"() : () -> ()
  }) : () -> ()
  func.return
}

// -----

// xDSL 0.74 does not check that values are defined before their uses.
// CHECK: tpu-invalid.mlir:[[# @LINE + 3]]:5: 'hlo.negate' op uses %e before it is defined (by 'hlo.negate' at {{.*}}tpu-invalid.mlir:[[# @LINE + 4]]:5); a value must be defined above its uses in a block
func.func @use_before_definition(%a: tensor<f32>) {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %d = hlo.negate %e : tensor<f32>
    %e = hlo.negate %d : tensor<f32>
    tpu.yield %e : tensor<f32>
  }
  func.return
}

// -----

// CHECK: 'tpu.send_to_host' op is in the host function of outside_compilation cluster '0'; it is the device side of a host transfer
func.func @send_to_host_on_the_host(%a: tensor<f32>) attributes {tpu.outside_compilation_cluster = "0"} {
  tpu.send_to_host "host_compute_channel_0_args"(%a : tensor<f32>)
  func.return
}

// -----

// CHECK: 'tpu.recv_at_host' op is in the device program of a tpu.replicate; it is the host side of a host transfer (in the host function of an outside_compilation cluster)
func.func @recv_at_host_on_the_device(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %y = tpu.recv_at_host "host_compute_channel_0_args" : tensor<f32>
    tpu.yield
  }
  func.return
}
