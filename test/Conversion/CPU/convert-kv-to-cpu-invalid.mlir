// RUN: kv-opt %s --convert-kv-to-cpu --split-input-file --verify-diagnostics

// The attribute must be an array of model types.
// expected-error @+1 {{'kv.export_forwards' must be an array of !kv.model types, got {x = f32}}}
module attributes {kv.export_forwards = {x = f32}} {
}

// -----

// Each entry must be a model type.
// expected-error @+1 {{'kv.export_forwards' must be an array of !kv.model types, got [f32]}}
module attributes {kv.export_forwards = [f32]} {
}

// -----

// A generated symbol may not clash with an existing one (the prefix is a
// hash of the config key, runtime/core/ModelConfig.h).
// expected-error @+1 {{cannot build the CPU forward of [dim=32 hidden=64 layers=1 heads=2 kv_heads=2 vocab=10 rope=interleaved theta=0x40c3880000000000 eps=0x3ee4f8b588e368f1 kv=f32]: symbol @kv_fwd_1e508b1b276864e5_rmsnorm already exists}}
module attributes {kv.export_forwards = [!kv.model<dim = 32, hidden = 64, layers = 1, heads = 2, kv_heads = 2, vocab = 10>]} {
  func.func @kv_fwd_1e508b1b276864e5_rmsnorm() {
    return
  }
}

// -----

// Head sizes beyond what the attention kernel holds in registers.
// expected-error @+1 {{head size 2048 exceeds 1024, the largest the CPU attention kernel holds in registers}}
module attributes {kv.export_forwards = [!kv.model<dim = 2048, hidden = 64, layers = 1, heads = 1, kv_heads = 1, vocab = 10>]} {
}

// -----

// An exported forward with pages of another type is [!kv.model, f16 | bf16 | f32].
// expected-error @+1 {{, i16] must be [!kv.model, f32 | f16 | bf16]}}
module attributes {kv.export_forwards = [[!kv.model<dim = 32, hidden = 64, layers = 1, heads = 2, kv_heads = 2, vocab = 10>, i16]]} {
}

// -----

// kv.weight_formats names [!kv.model, "formats"] pairs.
// expected-error @+1 {{'kv.weight_formats' must be an array of [!kv.model, "formats"], got "q8_0"}}
module attributes {kv.export_forwards = [!kv.model<dim = 32, hidden = 64, layers = 2, heads = 2, kv_heads = 2, vocab = 10>], kv.weight_formats = "q8_0"} {
}

// -----

// An unknown format.
// expected-error @+1 {{unknown weight format 'q9_9' (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k)}}
module attributes {kv.export_forwards = [!kv.model<dim = 32, hidden = 64, layers = 2, heads = 2, kv_heads = 2, vocab = 10>], kv.weight_formats = [[!kv.model<dim = 32, hidden = 64, layers = 2, heads = 2, kv_heads = 2, vocab = 10>, "wq:q9_9"]]} {
}

// -----

// Norm vectors are f32 in memory: the forward reads them so.
// expected-error @+1 {{'rms_att' is a vector (a norm or a bias): the forward reads it as f32}}
module attributes {kv.export_forwards = [!kv.model<dim = 32, hidden = 64, layers = 2, heads = 2, kv_heads = 2, vocab = 10>], kv.weight_formats = [[!kv.model<dim = 32, hidden = 64, layers = 2, heads = 2, kv_heads = 2, vocab = 10>, "rms_att:q8_0"]]} {
}

// -----

// A per-layer list names one format per layer.
// expected-error @+1 {{'wv:q8_0,f16,f16' names more than the 2 slices of wv}}
module attributes {kv.export_forwards = [!kv.model<dim = 32, hidden = 64, layers = 2, heads = 2, kv_heads = 2, vocab = 10>], kv.weight_formats = [[!kv.model<dim = 32, hidden = 64, layers = 2, heads = 2, kv_heads = 2, vocab = 10>, "wv:q8_0,f16,f16"]]} {
}
