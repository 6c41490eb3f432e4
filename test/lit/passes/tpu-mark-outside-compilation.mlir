// tpu-mark-outside-compilation: TF's soft placement (MLIR bridge pass
// mark-ops-for-outside-compilation). Ops of a replicate body that only the
// host can run move into new clusters "auto0", "auto1", ...; with
// allow-soft-placement=false they are errors instead.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics -p tpu-mark-outside-compilation | filecheck %s
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics -p 'tpu-mark-outside-compilation{allow-soft-placement=false}' | filecheck %s --check-prefix=NOSOFT

// CHECK-LABEL: func @device_ops_stay_on_device
// CHECK-NOT:   tpu.outside_compilation
// CHECK:       func.return
// NOSOFT-LABEL: func @device_ops_stay_on_device
// NOSOFT-NOT:   tpu.outside_compilation
func.func @device_ops_stay_on_device(%a: tensor<2xf32>, %b: tensor<2xf32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<2xf32>) {n = 2 : i64} {
    %y = hlo.exponential %x : tensor<2xf32>
    %s = tpu.cross_replica_sum %y : tensor<2xf32>
    tpu.yield %s : tensor<2xf32>
  }
  func.return
}

// -----

// The string ops form one cluster; the number the device needs is yielded.
// CHECK-LABEL: func @string_ops_get_a_cluster
// CHECK:       tpu.replicate
// CHECK-NEXT:    %[[N:.*]] = tpu.outside_compilation "auto0" -> (tensor<f32>) {
// CHECK-NEXT:      %[[F:.*]] = hlo.string_format "1{}"(%x)
// CHECK-NEXT:      %[[N1:.*]] = hlo.string_to_number %[[F]]
// CHECK-NEXT:      tpu.yield %[[N1]] : tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %y = hlo.add %[[N]], %x : tensor<f32>
// NOSOFT: 'hlo.string_format' op cannot run on the device (at train.py:12): it has string values; place it in outside_compilation or allow soft placement
func.func @string_ops_get_a_cluster(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %f = hlo.string_format "1{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string> loc("train.py":12:3)
    %n = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f32> loc("train.py":13:3)
    %y = hlo.add %n, %x : tensor<f32>
    tpu.yield %y : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// hlo.print is HOST_ONLY even without string values.
// CHECK-LABEL: func @host_only_op_without_strings
// CHECK:         tpu.outside_compilation "auto0" {
// CHECK-NEXT:      hlo.print(%x)
// CHECK-NEXT:      tpu.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    tpu.yield
// NOSOFT: 'hlo.print' op cannot run on the device (at train.py:7): it is a host-only op; place it in outside_compilation or allow soft placement
func.func @host_only_op_without_strings(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32> loc("train.py":7:5)
    tpu.yield
  }
  func.return
}

// -----

// CHECK-LABEL: func @device_op_splits_clusters
// CHECK:         tpu.outside_compilation "auto0" {
// CHECK-NEXT:      hlo.print(%x)
// CHECK-NEXT:      tpu.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %y = hlo.negate %x
// CHECK-NEXT:    tpu.outside_compilation "auto1" {
// CHECK-NEXT:      hlo.print(%y)
// CHECK-NEXT:      tpu.yield
// CHECK-NEXT:    }
// NOSOFT: 'hlo.print' op cannot run on the device: it is a host-only op
func.func @device_op_splits_clusters(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
    %y = hlo.negate %x : tensor<f32>
    hlo.print (%y) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
    tpu.yield
  }
  func.return
}

// -----

// Constants neither start nor split a cluster: they stay in front of it and
// tpu-outline-outside-compilation copies them to the host.
// CHECK-LABEL: func @constants_do_not_split_clusters
// CHECK:         %sep = hlo.string_constant ["; "]
// CHECK-NEXT:    %c = hlo.constant
// CHECK-NEXT:    tpu.outside_compilation "auto0" {
// CHECK-NEXT:      %f = hlo.string_format "x={}"(%x)
// CHECK-NEXT:      hlo.print(%f, %sep, %c)
// CHECK-NEXT:      tpu.yield
// CHECK-NEXT:    }
// CHECK-NOT:     tpu.outside_compilation
// NOSOFT: 'hlo.string_format' op cannot run on the device: it has string values
func.func @constants_do_not_split_clusters(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %f = hlo.string_format "x={}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
    %sep = hlo.string_constant ["; "] : tensor<!hlo.string>
    %c = hlo.constant dense<1.0> : tensor<f32>
    hlo.print (%f, %sep, %c) sep = "" end = "\n" to "stdout" summarize = 3 : tensor<!hlo.string>, tensor<!hlo.string>, tensor<f32>
    tpu.yield
  }
  func.return
}

// -----

// CHECK-LABEL: func @only_values_used_later_are_yielded
// CHECK:         %n, %m = tpu.outside_compilation "auto0" -> (tensor<f32>, tensor<f32>) {
// CHECK-NEXT:      %f = hlo.string_format
// CHECK-NEXT:      %[[N:.*]] = hlo.string_to_number %f
// CHECK-NEXT:      %[[M:.*]] = hlo.string_to_number %f
// CHECK-NEXT:      %unused = hlo.string_to_number %f
// CHECK-NEXT:      tpu.yield %[[N]], %[[M]] : tensor<f32>, tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %y = hlo.add %n, %m
func.func @only_values_used_later_are_yielded(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %f = hlo.string_format "{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
    %n = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f32>
    %m = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f32>
    %unused = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f32>
    %y = hlo.add %n, %m : tensor<f32>
    tpu.yield %y : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// Ops already in a cluster stay where the user put them, also without soft
// placement.
// CHECK-LABEL: func @existing_clusters_are_left_alone
// CHECK:         tpu.outside_compilation "0" {
// CHECK-NEXT:      %f = hlo.string_format
// CHECK-NEXT:      hlo.print(%f)
// CHECK-NEXT:      tpu.yield
// CHECK-NEXT:    }
// CHECK-NOT:     auto
// NOSOFT-LABEL: func @existing_clusters_are_left_alone
// NOSOFT:         tpu.outside_compilation "0" {
func.func @existing_clusters_are_left_alone(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    tpu.outside_compilation "0" {
      %f = hlo.string_format "{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
      hlo.print (%f) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<!hlo.string>
      tpu.yield
    }
    tpu.yield
  }
  func.return
}

// -----

// CHECK-LABEL: func @auto_names_skip_names_in_use
// CHECK:         tpu.outside_compilation "auto0" {
// CHECK:         %y = hlo.negate %x
// CHECK-NEXT:    tpu.outside_compilation "auto1" {
// CHECK-NEXT:      hlo.print(%y)
func.func @auto_names_skip_names_in_use(%a: tensor<f32>) {
  tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    tpu.outside_compilation "auto0" {
      hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      tpu.yield
    }
    %y = hlo.negate %x : tensor<f32>
    hlo.print (%y) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
    tpu.yield
  }
  func.return
}

// -----

// Outside a replicate everything runs on the host already.
// CHECK-LABEL: func @ops_outside_replicate_are_left_alone
// CHECK-NEXT:    %f = hlo.string_format
// CHECK-NEXT:    hlo.print(%f)
// CHECK-NEXT:    func.return %f
// NOSOFT-LABEL: func @ops_outside_replicate_are_left_alone
// NOSOFT-NEXT:    %f = hlo.string_format
func.func @ops_outside_replicate_are_left_alone(%x: tensor<f32>) -> tensor<!hlo.string> {
  %f = hlo.string_format "{}" (%x) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string>
  hlo.print (%f) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<!hlo.string>
  func.return %f : tensor<!hlo.string>
}

// -----

// hlo.summary_scalar is HOST_ONLY: it moves to a cluster of its own (with
// the hlo.summary_flush after it, HOST_ONLY too: one run of host ops); the
// replica id it is gated on stays a device value, the constant step stays
// where it is (outlining copies constants to the host).
// CHECK-LABEL: func @summary_goes_to_an_auto_cluster
// CHECK:         %y = hlo.multiply %x, %x : tensor<f32>
// CHECK-NEXT:    %r = tpu.replica_id : tensor<i32>
// CHECK-NEXT:    %s = hlo.constant dense<7> : tensor<i64>
// CHECK-NEXT:    tpu.outside_compilation "auto0" {
// CHECK-NEXT:      hlo.summary_scalar "loss" = %y at step %s if replica %r is zero to "/tmp/logs" : tensor<f32>, tensor<i64>, tensor<i32>
// CHECK-NEXT:      hlo.summary_flush "/tmp/logs"
// CHECK-NEXT:      tpu.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    tpu.yield %y : tensor<f32>
// NOSOFT: 'hlo.summary_scalar' op cannot run on the device (at train.py:21): it is a host-only op; place it in outside_compilation or allow soft placement
func.func @summary_goes_to_an_auto_cluster(%a: tensor<f32>, %b: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  %o:2 = tpu.replicate([%a, %b] as %x: tensor<f32>) {n = 2 : i64} {
    %y = hlo.multiply %x, %x : tensor<f32>
    %r = tpu.replica_id : tensor<i32>
    %s = hlo.constant dense<7> : tensor<i64>
    hlo.summary_scalar "loss" = %y at step %s if replica %r is zero to "/tmp/logs" : tensor<f32>, tensor<i64>, tensor<i32> loc("train.py":21:5)
    hlo.summary_flush "/tmp/logs"
    tpu.yield %y : tensor<f32>
  }
  func.return %o#0, %o#1 : tensor<f32>, tensor<f32>
}

// -----

// Host ops inside hlo.if / hlo.while regions get an auto cluster inside the
// region, so they run on the host exactly when the region runs.
// CHECK-LABEL: func @host_ops_in_regions
// CHECK:         } do {
// CHECK:           %v2 = hlo.if %c -> (tensor<f32>) {
// CHECK-NEXT:        %n = tpu.outside_compilation "auto0" -> (tensor<f32>) {
// CHECK-NEXT:          %f = hlo.string_format "v={}"(%v1)
// CHECK-NEXT:          %[[N:.*]] = hlo.string_to_number %f
// CHECK-NEXT:          tpu.yield %[[N]] : tensor<f32>
// CHECK-NEXT:        }
// CHECK-NEXT:        hlo.return %n
// CHECK-NEXT:      } else {
// CHECK-NEXT:        hlo.return %v1
// CHECK-NEXT:      }
// CHECK-NEXT:      tpu.outside_compilation "auto1" {
// CHECK-NEXT:        hlo.print(%v2)
// CHECK-NEXT:        tpu.yield
// CHECK-NEXT:      }
// CHECK-NEXT:      %v3 = hlo.add %v2, %v2
// NOSOFT: 'hlo.string_format' op cannot run on the device (at train.py:15): it has string values
func.func @host_ops_in_regions(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %z = hlo.constant dense<0> : tensor<i32>
    %w:2 = hlo.while(%i = %z, %v = %x) : tensor<i32>, tensor<f32> cond {
      %three = hlo.constant dense<3> : tensor<i32>
      %p = hlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %p : tensor<i1>
    } do {
    ^bb0(%i1: tensor<i32>, %v1: tensor<f32>):
      %one = hlo.constant dense<1> : tensor<i32>
      %i2 = hlo.add %i1, %one : tensor<i32>
      %c = hlo.compare LT, %i1, %one : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %v2 = hlo.if %c -> (tensor<f32>) {
        %f = hlo.string_format "v={}" (%v1) summarize = 3 : (tensor<f32>) -> tensor<!hlo.string> loc("train.py":15:9)
        %n = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f32>
        hlo.return %n : tensor<f32>
      } else {
        hlo.return %v1 : tensor<f32>
      }
      hlo.print (%v2) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      %v3 = hlo.add %v2, %v2 : tensor<f32>
      hlo.return %i2, %v3 : tensor<i32>, tensor<f32>
    }
    tpu.yield %w#1 : tensor<f32>
  }
  func.return %r : tensor<f32>
}

// -----

// A loop that carries a string is a host op as a whole: host control flow.
// CHECK-LABEL: func @string_loop_values_put_the_loop_on_the_host
// CHECK:         %z = hlo.constant
// CHECK-NEXT:    %n = tpu.outside_compilation "auto0" -> (tensor<f32>) {
// CHECK-NEXT:      %w, %w_1 = hlo.while(%i = %z, %s = %s0) : tensor<i32>, tensor<!hlo.string> cond {
// CHECK:             hlo.string_format "{}{}"(%s1, %x)
// CHECK:           %[[N:.*]] = hlo.string_to_number %w_1
// CHECK-NEXT:      tpu.yield %[[N]] : tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    tpu.yield %n
// NOSOFT: 'hlo.while' op cannot run on the device (at train.py:30): it has string values
func.func @string_loop_values_put_the_loop_on_the_host(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %s0 = hlo.string_constant [""] : tensor<!hlo.string>
    %z = hlo.constant dense<0> : tensor<i32>
    %w:2 = hlo.while(%i = %z, %s = %s0) : tensor<i32>, tensor<!hlo.string> cond {
      %three = hlo.constant dense<3> : tensor<i32>
      %c = hlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %c : tensor<i1>
    } do {
    ^bb0(%i1: tensor<i32>, %s1: tensor<!hlo.string>):
      %one = hlo.constant dense<1> : tensor<i32>
      %i2 = hlo.add %i1, %one : tensor<i32>
      %s2 = hlo.string_format "{}{}" (%s1, %x) summarize = 3 : (tensor<!hlo.string>, tensor<f32>) -> tensor<!hlo.string>
      hlo.return %i2, %s2 : tensor<i32>, tensor<!hlo.string>
    } loc("train.py":30:5)
    %n = hlo.string_to_number %w#1 : (tensor<!hlo.string>) -> tensor<f32>
    tpu.yield %n : tensor<f32>
  }
  func.return %r : tensor<f32>
}
