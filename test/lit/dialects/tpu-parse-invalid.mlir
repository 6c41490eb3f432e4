// Malformed tpu.replicate syntax (and literals xDSL cannot hold): a parse
// error at the line and column of the problem, never a Python traceback.
// --parsing-diagnostics prints each parse error and goes on with the next case.
// RUN: xtpu-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// CHECK: tpu-parse-invalid.mlir:[[# @LINE + 3]]:53
// CHECK: tpu.replicate's n must be the number of replicas, an integer (n = <replicas> : i64, at most 65536), got 2.000000e+00 : bf16
func.func @n_of_bf16(%a: tensor<f32>, %b: tensor<f32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<f32>) {n = 2 : bf16} {
    tpu.yield %x : tensor<f32>
  }
  func.return
}

// -----

// CHECK: tpu-parse-invalid.mlir:[[# @LINE + 3]]:53
// CHECK: tpu.replicate's n must be the number of replicas, an integer (n = <replicas> : i64, at most 65536), got 2.000000e+00 : f32
func.func @n_of_f32(%a: tensor<f32>, %b: tensor<f32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<f32>) {n = 2.0 : f32} {
    tpu.yield %x : tensor<f32>
  }
  func.return
}

// -----

// CHECK: tpu-parse-invalid.mlir:[[# @LINE + 3]]:53
// CHECK: tpu.replicate's n must be the number of replicas, an integer (n = <replicas> : i64, at most 65536), got true
func.func @n_of_i1(%a: tensor<f32>, %b: tensor<f32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<f32>) {n = true} {
    tpu.yield %x : tensor<f32>
  }
  func.return
}

// -----

// CHECK: tpu-parse-invalid.mlir:[[# @LINE + 3]]:19
// CHECK: tpu.replicate's n must be the number of replicas, an integer (n = <replicas> : i64, at most 65536), got "2"
func.func @n_of_string() {
  tpu.replicate() {n = "2"} {
    tpu.yield
  }
  func.return
}

// -----

// CHECK: tpu-parse-invalid.mlir:[[# @LINE + 3]]:19
// CHECK: tpu.replicate's n must be the number of replicas, an integer (n = <replicas> : i64, at most 65536), got 99999999999 : i64
func.func @too_many_replicas() {
  tpu.replicate() {n = 99999999999 : i64} {
    tpu.yield
  }
  func.return
}

// -----

// CHECK: tpu-parse-invalid.mlir:[[# @LINE + 3]]:19
// CHECK: tpu.replicate needs {n = <replicas> : i64}
func.func @no_n() {
  tpu.replicate() {placement = "host"} {
    tpu.yield
  }
  func.return
}

// -----

// CHECK: tpu-parse-invalid.mlir:[[# @LINE + 3]]:47
// CHECK: tpu.replicate's num_cores_per_replica must be the number of logical cores per replica, an integer (num_cores_per_replica = <logical cores per replica> : i64, at most 65536), got 2.000000e+00 : f32
func.func @cores_of_f32(%a: tensor<f32>) {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64, num_cores_per_replica = 2.0 : f32} {
    tpu.yield %x : tensor<f32>
  }
  func.return
}

// -----

// CHECK: tpu-parse-invalid.mlir:[[# @LINE + 3]]:19
// CHECK: tpu.replicate's placement must be a string ("host"), got 3 : i64
func.func @placement_of_int() {
  tpu.replicate() {n = 1 : i64, placement = 3} {
    tpu.yield
  }
  func.return
}

// -----

// An input naming the body's own argument is not defined where the
// replicate is (it was bound to the argument, and the module crashed later).
// CHECK: values used but not defined: [%x]
func.func @input_is_the_body_argument(%a: tensor<f32>) {
  %r:2 = tpu.replicate([%a, %x] as %x: tensor<f32>) {n = 2 : i64} {
    tpu.yield %x : tensor<f32>
  }
  func.return
}

// -----

// The same for hlo.while: an initial value naming a value of its regions.
// CHECK: values used but not defined: [%j]
func.func @while_init_from_its_region(%a: tensor<i32>) -> tensor<i32> {
  %r = hlo.while(%i = %j) : tensor<i32> cond {
    %j = hlo.negate %i : tensor<i32>
    %c = hlo.compare LT, %j, %i : (tensor<i32>, tensor<i32>) -> tensor<i1>
    hlo.return %c : tensor<i1>
  } do {
  ^bb0(%k: tensor<i32>):
    hlo.return %k : tensor<i32>
  }
  func.return %r : tensor<i32>
}

// -----

// Literals xDSL 0.74 reads but cannot hold raise inside xDSL; they are parse
// errors at the op.
// CHECK: tpu-parse-invalid.mlir:[[# @LINE + 4]]:5
// CHECK: Integer value 18446744073709551616 is out of range for type i64
func.func @group_id_out_of_range(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %s = tpu.cross_replica_sum %x groups = dense<[[0, 18446744073709551616]]> : tensor<1x2xi64> : tensor<f32>
    tpu.yield
  }
  func.return
}

// -----

// CHECK: tpu-parse-invalid.mlir:[[# @LINE + 2]]:46
// CHECK: float literals of type f80 are not supported
func.func @f80_literal() attributes {scale = 1.0 : f80} {
  func.return
}

// -----

// A splat of a huge type is materialized while it is read: out of memory
// is a parse error at the op, not a MemoryError.
// CHECK: tpu-parse-invalid.mlir:[[# @LINE + 3]]:3
// CHECK: the values of this op do not fit in memory
func.func @huge_splat() {
  %c = hlo.constant dense<1.0> : tensor<100000x100000x100000xf32>
  func.return
}
