"""One PTQ method over a model's layers, one module per method (`ptq.run.run_method` picks the runner).

    gptq          RTN and GPTQ (the weight-only loop; GPTQ's calibration stages in `sequential`)
    awq           AWQ: scale search per group, folds, clipping
    smoothquant   SmoothQuant: smoothing scales folded into the norms, W8A8 measured on a token sample
    llm_int8      LLM.int8(): the int8 + fp16-outlier decomposition measured on a token sample
    kivi          KIVI: the KV cache's reconstruction error and the KL of decoding over it
    common        what they share: captures, the layers' weights, the per-layer loop, the folds

A runner is `runner(model, method, scheme, names, calibration, evaluation, options, meter, progress)` and
returns a `ptq.records.PTQResult`; the folding runners also take the checked scale groups.
"""
