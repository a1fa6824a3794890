// UNSUPPORTED: amx
// RUN: not kv-opt %s --convert-kv-to-cpu=quant-dot=amx 2>&1 | FileCheck %s

// quant-dot=amx on a host without AMX int8 tiles, or whose Linux refuses
// this process the tile state, is an error, not a silent fallback.
// CHECK: error: convert-kv-to-cpu: quant-dot=amx needs AMX int8 tiles (amx-tile, amx-int8, with AVX-512 VNNI) granted to this process by Linux (arch_prctl ARCH_REQ_XCOMP_PERM), which this host lacks
!m = !kv.model<dim = 256, hidden = 512, layers = 1, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:q8_0;wk:q8_0;wv:q8_0;wo:q8_0;w1:q8_0;w2:q8_0;w3:q8_0;wcls:q8_0"]]} {
}
