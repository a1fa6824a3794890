// RUN: kv-opt %s --kv-derive-cot-slices="emit-plan" -split-input-file -verify-diagnostics -o /dev/null

// emit-plan prices a plan whose sizes are dynamic as formulas of them, and at
// the arguments' kv.sample_length. A tiny model, counted by hand as in
// test/Analysis/dependency-slice.mlir: a token attending ctx keys costs
// 1152 + 32·ctx FLOPs, a logits row 160.

// An edit of a dynamic fact, with a dynamic reused document before the answer.
// At len(@f') = 4, len(@d) = 5:
//   positions: @a [0,4) @f [4,8) @t [8,11) @d [11,16) @ans [16,18)
//   plan:  [4,11) + [16,18) = 9 tokens, 9·1152 + 32·(5+...+11 + 17+18) = 13280,
//          + 2·160 = 13600
// The first_k budget's cost has no polynomial form while @d's length is
// dynamic (min(2, len(@d))); at the sample lengths it adds [11,13): 11 tokens.
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @ctx>
kv.context @ctx {
  kv.segment @a kind(system) tokens(4)
  kv.segment @f kind(fact) tokens(?)
  kv.segment @t kind(thought) tokens(3) deps(@f)
  kv.segment @d kind(document) tokens(?)
  kv.segment @ans kind(answer) tokens(2) deps(@t, @d)
}
func.func @sampled(%m: !model, %a: tensor<4xi32>, %f: tensor<?xi32> {kv.sample_length = 2 : i64},
                   %t: tensor<3xi32>, %d: tensor<?xi32> {kv.name = "doc", kv.sample_length = 5 : i64},
                   %ans: tensor<2xi32>, %g: tensor<?xi32> {kv.sample_length = 4 : i64}) -> (!cache, !cache) {
  %e = kv.empty : !cache
  %c1, %l1 = kv.prefill %m, %e, %a segment @a last : !model, (!cache), tensor<4xi32> -> !cache, tensor<1x10xf32>
  %c2, %l2 = kv.prefill %m, %c1, %f segment @f last : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x10xf32>
  %c3, %l3 = kv.prefill %m, %c2, %t segment @t last : !model, (!cache), tensor<3xi32> -> !cache, tensor<1x10xf32>
  %c4, %l4 = kv.prefill %m, %c3, %d segment @d last : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x10xf32>
  %c5, %l5 = kv.prefill %m, %c4, %ans segment @ans last : !model, (!cache), tensor<2xi32> -> !cache, tensor<1x10xf32>
  // expected-remark @below {{edit of @f (cot_slice); keep: @a; recompute: @f, @t, @ans; reuse: @d}}
  // expected-remark @below {{cost: plan (5 + len(@f')) tokens (7200 + 64*len(@d) + 1456*len(@f') + 16*len(@f')^2) FLOPs; exact (5 + len(@d) + len(@f')) tokens (7200 + 1456*len(@d) + 1456*len(@f') + 16*len(@d)^2 + 32*len(@d)*len(@f') + 16*len(@f')^2) FLOPs; full (9 + len(@d) + len(@f')) tokens (12128 + 1456*len(@d) + 1456*len(@f') + 16*len(@d)^2 + 32*len(@d)*len(@f') + 16*len(@f')^2) FLOPs}}
  // expected-remark @below {{cost at the arguments' kv.sample_length (len(@f) = 2, len(@d) = 5, len(@f') = 4): plan 9 tokens 13600 FLOPs; exact 14 tokens 21600 FLOPs; full 18 tokens 26528 FLOPs}}
  %r = kv.edit %m, %c5[@f] = %g strategy <cot_slice> : !model, !cache, tensor<?xi32>
  // expected-remark @below {{edit of @f (cot_slice, first_k = 2)}}
  // expected-remark @below {{cost: plan not a polynomial of the sizes (a first_k budget over a segment of dynamic length); exact (5 + len(@d) + len(@f')) tokens}}
  // expected-remark @below {{cost at the arguments' kv.sample_length (len(@f) = 2, len(@d) = 5, len(@f') = 4): plan 11 tokens 16704 FLOPs; exact 14 tokens 21600 FLOPs}}
  %r2 = kv.edit %m, %c5[@f] = %g strategy <cot_slice, first_k = 2> : !model, !cache, tensor<?xi32>
  return %r, %r2 : !cache, !cache
}

// -----

// Without a kv.sample_length for every size, the formula alone.
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32, @ctx>
kv.context @ctx {
  kv.segment @a kind(system) tokens(4)
  kv.segment @f kind(fact) tokens(?)
  kv.segment @ans kind(answer) tokens(2) deps(@f)
}
func.func @unsampled(%m: !model, %c: !cache, %g: tensor<?xi32> {kv.sample_length = 4 : i64}) -> !cache {
  // expected-remark @below {{edit of @f (exact)}}
  // expected-remark @below {{cost: plan (2 + len(@f')) tokens}}
  %r = kv.edit %m, %c[@f] = %g strategy <exact> : !model, !cache, tensor<?xi32>
  return %r : !cache
}

// -----

// Blocks prefilled in a function of their own: their lengths are those of the
// arguments passed to it, named by kv.name. The first block's plan is free;
// prefilling it again after 4 tokens, [4,4+x) with x = len(b1), would cost
// x·1152 + 32·(5+...+(4+x)) = 1296·x + 16·x², 4032 at x = 3.
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
!cache = !kv.cache<1x1x4xf32>
func.func @block(%m: !model, %tokens: tensor<?xi32>) -> !cache {
  %e = kv.empty : !cache
  %b, %l = kv.prefill %m, %e, %tokens last : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x10xf32>
  return %b : !cache
}
func.func @composed(%m: !model, %main: tensor<4xi32>,
                    %t1: tensor<?xi32> {kv.name = "b1", kv.sample_length = 3 : i64},
                    %t2: tensor<?xi32> {kv.name = "b2"}) -> !cache {
  %e = kv.empty : !cache
  %c, %l = kv.prefill %m, %e, %main last : !model, (!cache), tensor<4xi32> -> !cache, tensor<1x10xf32>
  %b1 = func.call @block(%m, %t1) : (!model, tensor<?xi32>) -> !cache
  %b2 = func.call @block(%m, %t2) : (!model, tensor<?xi32>) -> !cache
  // expected-remark @below {{compose: block of len(b1) tokens at position 4, shift 4}}
  // expected-remark @below {{cost: plan 0 tokens 0 FLOPs; exact (len(b1)) tokens (1296*len(b1) + 16*len(b1)^2) FLOPs; full (4 + len(b1)) tokens (4928 + 1296*len(b1) + 16*len(b1)^2) FLOPs}}
  // expected-remark @below {{cost at the arguments' kv.sample_length (len(b1) = 3): plan 0 tokens 0 FLOPs; exact 3 tokens 4032 FLOPs; full 7 tokens 8960 FLOPs}}
  %r1 = kv.compose %c, %b1 : !cache, !cache
  // expected-remark @below {{compose: block of len(b2) tokens at position 4 + len(b1), shift 4 + len(b1)}}
  // expected-remark @below {{cost: plan 0 tokens 0 FLOPs; exact (len(b2)) tokens}}
  %r2 = kv.compose %r1, %b2 : !cache, !cache
  return %r2 : !cache
}
