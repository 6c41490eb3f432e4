module attributes {tf.versions = {bad_consumers = [], min_consumer = 0 : i32, producer = 2474 : i32}} {
  func.func @main() {
    %0 = "tf.TPUCompilationResult"() {_tpu_compilation_status = "cluster", device = ""} : () -> tensor<!tf_type.string>
    %1:2 = tf_device.replicate {n = 2 : i32} {
      %2 = "tf_device.cluster_func"() <{func = @_func}> {_dynamic_arg_index = [], _has_manual_control_dependencies = true, _replication_info = "cluster", _xla_compile_device_type = "TPU", allow_soft_placement = false, computation_shape = [], device = "", device_assignment = [], host_compute_core = [], input_sharding_configuration = [], num_cores_per_replica = 1 : i64, output_sharding_configuration = [""], padding_map = [], step_marker_location = "STEP_MARK_AT_ENTRY", topology = "", tpu_compile_options_proto = "", use_shardy_partitioner = false, use_spmd_for_xla_partitioning = true, use_tpu = true} : () -> tensor<f32>
      tf_device.return %2 : tensor<f32>
    }
    return
  }
  func.func private @_func() -> (tensor<f32> {mhlo.sharding = ""}) {
    %cst = "tf.Const"() <{value = dense<7.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    return %cst : tensor<f32>
  }
}
