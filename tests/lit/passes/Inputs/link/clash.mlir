ep.param @hidden : index
