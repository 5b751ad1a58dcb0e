ep.param @hidden : index {min = 1 : i64}
ep.constant @state_error = 3 : index
