// kv-lower-to-nvvm rejects unknown targets and formats, and a missing
// toolkit: an error, never a silent fallback.
// RUN: not kv-opt %s --kv-lower-to-nvvm="chip=sm_42" 2>&1 | FileCheck %s --check-prefix=CHIP
// RUN: not kv-opt %s --kv-lower-to-nvvm="chip=gfx90a" 2>&1 | FileCheck %s --check-prefix=AMD
// RUN: not kv-opt %s --kv-lower-to-nvvm="format=fatbin" 2>&1 | FileCheck %s --check-prefix=FORMAT
// RUN: not kv-opt %s --kv-lower-to-nvvm="features=ptx80" 2>&1 | FileCheck %s --check-prefix=FEATURES
// RUN: not kv-opt %s --kv-lower-to-nvvm="opt-level=4" 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not kv-opt %s --kv-lower-to-nvvm="toolkit=/nonexistent/cuda" 2>&1 | FileCheck %s --check-prefix=TOOLKIT

// CHIP: kv-lower-to-nvvm: unknown chip 'sm_42' (expected one of sm_75, sm_80
// AMD: kv-lower-to-nvvm: unknown chip 'gfx90a'
// FORMAT: kv-lower-to-nvvm: unknown format 'fatbin' (expected bin or isa)
// FEATURES: kv-lower-to-nvvm: unknown features 'ptx80' (expected +ptxNN, e.g. +ptx80)
// OPT: kv-lower-to-nvvm: opt-level 4 is outside 0..3
// TOOLKIT: kv-lower-to-nvvm: toolkit '/nonexistent/cuda' has no /nonexistent/cuda/nvvm/libdevice/libdevice.10.bc
module attributes {kv.export_forwards = [!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>]} {}
