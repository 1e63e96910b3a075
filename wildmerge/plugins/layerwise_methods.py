"""Methods that cannot be written as a per-tensor mergekit method: they run models layer by layer (RegMean, Chain
of Merges) in wildmerge's own driver, reached from the same mergekit YAML through the ``run_merge`` wrapper."""

# merge_method name -> "module:function(merge_config, out_path, options, config_source)"
LAYERWISE_METHODS = {
    "chain_of_merges": "wildmerge.plugins.layerwise:run_layerwise_merge",
    "regmean": "wildmerge.plugins.layerwise:run_layerwise_merge",
}
