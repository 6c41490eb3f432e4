// hlo-fuse-elementwise (XLA's loop and input fusion): elementwise ops,
// broadcasts, converts, selects and the reductions reading them become one
// fusion.region each, put where the first member was; values used outside
// are its results.  Never fused: collectives, host transfers, side effects,
// ops with regions, dynamic shapes, ops of constants only.
// RUN: xtpu-opt %s --split-input-file -p hlo-fuse-elementwise | filecheck %s
// RUN: xtpu-opt %s --split-input-file -p hlo-fuse-elementwise | xtpu-opt --split-input-file | filecheck %s --check-prefix=ROUND

// A broadcast, an add and a tanh are one loop fusion; %s is used after it
// too, so the region gives both (multi-output).
// CHECK-LABEL: func @loop_chain
// CHECK-NEXT:    %s, %t = fusion.region "loop"(%y, %x) : (tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
// CHECK-NEXT:    ^bb0(%y_1: tensor<8xf32>, %x_1: tensor<4x8xf32>):
// CHECK-NEXT:      %b = hlo.broadcast_in_dim %y_1, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:      %s_1 = hlo.add %x_1, %b : tensor<4x8xf32>
// CHECK-NEXT:      %t_1 = hlo.tanh %s_1 : tensor<4x8xf32>
// CHECK-NEXT:      fusion.yield %s_1, %t_1 : tensor<4x8xf32>, tensor<4x8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %s, %t
// ROUND-LABEL: func @loop_chain
// ROUND:         fusion.region "loop"
func.func @loop_chain(%x: tensor<4x8xf32>, %y: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %b = hlo.broadcast_in_dim %y, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
  %s = hlo.add %x, %b : tensor<4x8xf32>
  %t = hlo.tanh %s : tensor<4x8xf32>
  func.return %s, %t : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Input fusion: the reduction reads the fused ops; its init constant moves
// before the region.  The op reading the reduction's result does not join
// (a reduce ends its chain): it starts the next region with the divide.
// CHECK-LABEL: func @input_fusion
// CHECK-NEXT:    %z = hlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %r = fusion.region "input"(%x, %z) : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32> {
// CHECK-NEXT:    ^bb0(%x_1: tensor<4x8xf32>, %z_1: tensor<f32>):
// CHECK-NEXT:      %e = hlo.exponential %x_1 : tensor<4x8xf32>
// CHECK-NEXT:      %r_1 = hlo.reduce(%e init : %z_1) applies add across dimensions = [1]
// CHECK-NEXT:      fusion.yield %r_1 : tensor<4xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %q = fusion.region "loop"(%r, %x) : (tensor<4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK:           %rb = hlo.broadcast_in_dim
// CHECK-NEXT:      %e2 = hlo.exponential
// CHECK-NEXT:      %q_1 = hlo.divide %e2, %rb
// CHECK-NEXT:      fusion.yield %q_1 : tensor<4x8xf32>
func.func @input_fusion(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = hlo.exponential %x : tensor<4x8xf32>
  %z = hlo.constant dense<0.0> : tensor<f32>
  %r = hlo.reduce(%e init: %z) applies add across dimensions = [1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>
  %rb = hlo.broadcast_in_dim %r, dims = [0] : (tensor<4xf32>) -> tensor<4x8xf32>
  %e2 = hlo.exponential %x : tensor<4x8xf32>
  %q = hlo.divide %e2, %rb : tensor<4x8xf32>
  func.return %q : tensor<4x8xf32>
}

// -----

// Compare, select and convert join, and so does %a, which reads only the
// group (the dot_general %d0 between reads %s, a result of the region).  %m
// reads %a and the dot of %a: in %a's region it would both feed and read
// the dot, so it stays alone.
// CHECK-LABEL: func @select_convert_and_no_cycle
// CHECK-NEXT:    %c, %s, %a = fusion.region "loop"(%x, %y)
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      %c_1 = hlo.compare GT, %x_1, %y_1
// CHECK-NEXT:      %s_1 = hlo.select %c_1, %x_1, %y_1
// CHECK-NEXT:      %f = hlo.convert %c_1
// CHECK-NEXT:      %a_1 = hlo.add %s_1, %f
// CHECK-NEXT:      fusion.yield %c_1, %s_1, %a_1
// CHECK-NEXT:    }
// CHECK-NEXT:    %d0 = hlo.dot_general %s, %s
// CHECK-NEXT:    %d = hlo.dot_general %a, %a
// CHECK-NEXT:    %m = hlo.multiply %a, %d : tensor<2x2xf32>
// CHECK-NEXT:    func.return %m, %c
func.func @select_convert_and_no_cycle(%x: tensor<2x2xf32>, %y: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xi1>) {
  %c = hlo.compare GT, %x, %y : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xi1>
  %s = hlo.select %c, %x, %y : (tensor<2x2xi1>, tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %f = hlo.convert %c : (tensor<2x2xi1>) -> tensor<2x2xf32>
  %d0 = hlo.dot_general %s, %s, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %a = hlo.add %s, %f : tensor<2x2xf32>
  %d = hlo.dot_general %a, %a, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %m = hlo.multiply %a, %d : tensor<2x2xf32>
  func.return %m, %c : tensor<2x2xf32>, tensor<2x2xi1>
}

// -----

// A collective and a host transfer are never fused and split the chains
// around them; an op of constants only is left to the runtime's folding.
// CHECK-LABEL: func @collective_and_host_transfer
// CHECK:         %r, %r_1 = tpu.replicate
// CHECK-NEXT:      %one = hlo.constant
// CHECK-NEXT:      %k = hlo.negate %one : tensor<2xf32>
// CHECK-NEXT:      %b = fusion.region "loop"(%x, %k)
// CHECK:             %a = hlo.add
// CHECK-NEXT:        %b_1 = hlo.multiply
// CHECK-NEXT:        fusion.yield %b_1
// CHECK:           %s = tpu.cross_replica_sum %b : tensor<2xf32>
// CHECK-NEXT:      tpu.send_to_host "host_compute_channel_0_args"(%s : tensor<2xf32>)
// CHECK-NEXT:      %d = fusion.region "loop"(%s)
// CHECK:             %c = hlo.exponential
// CHECK-NEXT:        %d_1 = hlo.tanh
// CHECK-NEXT:        fusion.yield %d_1
func.func @collective_and_host_transfer(%p: tensor<2xf32>, %q: tensor<2xf32>) {
  %r:2 = tpu.replicate([%p, %q] as %x: tensor<2xf32>) {n = 2 : i64} {
    %one = hlo.constant dense<1.0> : tensor<2xf32>
    %k = hlo.negate %one : tensor<2xf32>
    %a = hlo.add %x, %k : tensor<2xf32>
    %b = hlo.multiply %a, %a : tensor<2xf32>
    %s = tpu.cross_replica_sum %b : tensor<2xf32>
    tpu.send_to_host "host_compute_channel_0_args"(%s : tensor<2xf32>)
    %c = hlo.exponential %s : tensor<2xf32>
    %d = hlo.tanh %c : tensor<2xf32>
    tpu.yield %d : tensor<2xf32>
  }
  func.return
}

// -----

// Values of a dynamic size (from hlo.set_dimension_size) and ops with side
// effects (hlo.print) stay out; the ops inside an hlo.while body fuse there.
// CHECK-LABEL: func @dynamic_print_and_regions
// CHECK-NEXT:    %p = hlo.set_dimension_size
// CHECK-NEXT:    %a = hlo.add %p, %p
// CHECK-NEXT:    %b = hlo.multiply %a, %a
// CHECK-NEXT:    hlo.print
// CHECK-NEXT:    %w, %w_1 = hlo.while
// CHECK:           %v2 = fusion.region "loop"
// CHECK:             %v1 = hlo.add
// CHECK-NEXT:        %v2_1 = hlo.multiply
func.func @dynamic_print_and_regions(%x: tensor<8xf32>, %n: tensor<i32>, %i0: tensor<i32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<8xf32>, tensor<i32>) -> tensor<8xf32>
  %a = hlo.add %p, %p : tensor<8xf32>
  %b = hlo.multiply %a, %a : tensor<8xf32>
  hlo.print (%x) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<8xf32>
  %w:2 = hlo.while(%i = %i0, %v = %x) : tensor<i32>, tensor<8xf32> cond {
    %c = hlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    hlo.return %c : tensor<i1>
  } do {
  ^bb0(%i1: tensor<i32>, %v0: tensor<8xf32>):
    %v1 = hlo.add %v0, %v0 : tensor<8xf32>
    %v2 = hlo.multiply %v1, %v1 : tensor<8xf32>
    hlo.return %i1, %v2 : tensor<i32>, tensor<8xf32>
  }
  func.return %b, %w#1 : tensor<8xf32>, tensor<8xf32>
}

// -----

// A scalar constant broadcast in the middle of a chain (as tracing emits
// `x * 0.5` after the ops before it) moves to the start of the block with
// what it is computed from, so the chain is one region reading it; the
// all-reduce of a constant is not hoisted (only ops that may fuse move).
// CHECK-LABEL: func @constant_mid_chain
// CHECK-NEXT:    %c = hlo.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT:    %h = hlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %m = fusion.region "loop"(%x, %h) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:    ^bb0(%x_1: tensor<4x8xf32>, %h_1: tensor<4x8xf32>):
// CHECK-NEXT:      %t = hlo.tanh %x_1 : tensor<4x8xf32>
// CHECK-NEXT:      %m_1 = hlo.multiply %t, %h_1 : tensor<4x8xf32>
// CHECK-NEXT:      fusion.yield %m_1 : tensor<4x8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %r = ccl.all_reduce %m applies add
// CHECK-NEXT:    %k = ccl.all_reduce %h applies add
// CHECK-NEXT:    func.return %r, %k
func.func @constant_mid_chain(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %t = hlo.tanh %x : tensor<4x8xf32>
  %c = hlo.constant dense<5.000000e-01> : tensor<f32>
  %h = hlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<4x8xf32>
  %m = hlo.multiply %t, %h : tensor<4x8xf32>
  %r = ccl.all_reduce %m applies add groups = dense<0> : tensor<1x1xi64> : tensor<4x8xf32>
  %k = ccl.all_reduce %h applies add groups = dense<0> : tensor<1x1xi64> : tensor<4x8xf32>
  func.return %r, %k : tensor<4x8xf32>, tensor<4x8xf32>
}
