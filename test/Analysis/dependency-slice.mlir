// RUN: kv-opt %s -test-kv-dependency-slice -split-input-file -verify-diagnostics -o /dev/null
// RUN: kv-opt %s -test-kv-dependency-slice="dynamic-size=6" -split-input-file -mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s --check-prefix=DYN

// Costs use a tiny model so they can be counted by hand:
//   dim 8, hidden 16, 1 layer, kv_dim 4 (2 heads of 4, 1 KV head), vocab 10.
// One token attending ctx keys costs
//   2·(8·8 + 2·8·4 + 8·8 + 3·8·16) + 4·ctx·8 = 1152 + 32·ctx FLOPs,
// the token at index i attends i + 1 keys, and each answer row's logits cost
// 2·8·10 = 160 FLOPs (logits are counted for the last segment only, in all
// three figures).

// A chain: @t depends on the fact, @b does not. Same-length edit.
//   positions: @a [0,4) @f [4,6) @t [6,9) @b [9,14)
//   plan:  @f, @t = 5 tokens, 5·1152 + 32·(5+6+7+8+9) = 6880, + 5·160 = 7680
//   exact: [4,14) = 10 tokens, 11520 + 32·95 = 14560, + 800 = 15360
//   full:  [0,14) = 14 tokens, 16128 + 32·105 = 19488, + 800 = 20288
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @chain {
  kv.segment @a kind(system) tokens(4)
  kv.segment @f kind(fact) tokens(2)
  kv.segment @t kind(thought) tokens(3) deps(@f)
  kv.segment @b kind(tool) tokens(5)
}
func.func @edit_chain(%m: !model, %c: !kv.cache<1x1x4xf32, @chain>, %t: tensor<2xi32>) -> !kv.cache<1x1x4xf32, @chain> {
  // expected-remark @below {{edit of @f (cot_slice); keep: @a; recompute: @f, @t; reuse: @b; reused segments shift by len(@f') - len(@f)}}
  // expected-remark @below {{cost: plan 5 tokens 7680 FLOPs; exact 10 tokens 15360 FLOPs; full 14 tokens 20288 FLOPs}}
  %e = kv.edit %m, %c[@f] = %t strategy <cot_slice> : !model, !kv.cache<1x1x4xf32, @chain>, tensor<2xi32>
  return %e : !kv.cache<1x1x4xf32, @chain>
}

// -----

// A diamond, edited at the start with a fact of 4 tokens (a dynamic segment,
// since the edit changes its length; its old length does not matter here):
// both branches and the join are in the slice, the independent @u is reused.
//   final positions: @f [0,4) @l [4,7) @r [7,10) @j [10,12) @u [12,16)
//   plan:  [0,12) = 12 tokens, 12·1152 + 32·78 = 16320, + 4·160 = 16960
//   exact = full: [0,16) = 16 tokens, 18432 + 32·136 = 22784, + 640 = 23424
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @diamond {
  kv.segment @f kind(fact) tokens(?)
  kv.segment @l kind(thought) tokens(3) deps(@f)
  kv.segment @r kind(thought) tokens(3) deps(@f)
  kv.segment @j kind(thought) tokens(2) deps(@l, @r)
  kv.segment @u kind(document) tokens(4)
}
func.func @edit_diamond(%m: !model, %c: !kv.cache<1x1x4xf32, @diamond>, %t: tensor<4xi32>) -> !kv.cache<1x1x4xf32, @diamond> {
  // expected-remark @below {{edit of @f (cot_slice); keep: none; recompute: @f, @l, @r, @j; reuse: @u; reused segments shift by len(@f') - len(@f)}}
  // expected-remark @below {{cost: plan 12 tokens 16960 FLOPs; exact 16 tokens 23424 FLOPs; full 16 tokens 23424 FLOPs}}
  %e = kv.edit %m, %c[@f] = %t strategy <cot_slice> : !model, !kv.cache<1x1x4xf32, @diamond>, tensor<4xi32>
  return %e : !kv.cache<1x1x4xf32, @diamond>
}

// -----

// Several facts: editing the second one leaves the first fact's thought @t1
// out of the slice; first_k = 1 recomputes @t1's first token anyway.
//   positions: @f1 [0,2) @f2 [2,4) @t1 [4,7) @t2 [7,10) @ans [10,12)
//   plan:  @f2 [2,4) + @t1 [4,5) + @t2, @ans [7,12) = 8 tokens,
//          8·1152 + 32·(3+4+5+8+9+10+11+12) = 11232, + 2·160 = 11520
//   exact: [2,12) = 10 tokens, 11520 + 32·75 = 13920, + 320 = 14240
//   full:  [0,12) = 12 tokens, 13824 + 32·78 = 16320, + 320 = 16640
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @facts {
  kv.segment @f1 kind(fact) tokens(2)
  kv.segment @f2 kind(fact) tokens(2)
  kv.segment @t1 kind(thought) tokens(3) deps(@f1)
  kv.segment @t2 kind(thought) tokens(3) deps(@f2)
  kv.segment @ans kind(answer) tokens(2) deps(@t1, @t2)
}
func.func @edit_facts(%m: !model, %c: !kv.cache<1x1x4xf32, @facts>, %t: tensor<2xi32>) -> !kv.cache<1x1x4xf32, @facts> {
  // expected-remark @below {{edit of @f2 (cot_slice, first_k = 1); keep: @f1; recompute: @f2, @t2, @ans; reuse: @t1; reused segments shift by len(@f2') - len(@f2)}}
  // expected-remark @below {{cost: plan 8 tokens 11520 FLOPs; exact 10 tokens 14240 FLOPs; full 12 tokens 16640 FLOPs}}
  %e = kv.edit %m, %c[@f2] = %t strategy <cot_slice, first_k = 1> : !model, !kv.cache<1x1x4xf32, @facts>, tensor<2xi32>
  return %e : !kv.cache<1x1x4xf32, @facts>
}

// -----

// The exact strategy, edited at the start (a dynamic segment, 5 tokens after
// the edit): everything is recomputed, and the three figures agree.
//   [0,9) = 9 tokens, 9·1152 + 32·45 = 11808, + 2·160 = 12128
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @start {
  kv.segment @s kind(system) tokens(?)
  kv.segment @h kind(history) tokens(2)
  kv.segment @q kind(user) tokens(2)
}
func.func @edit_start(%m: !model, %c: !kv.cache<1x1x4xf32, @start>, %t: tensor<5xi32>) -> !kv.cache<1x1x4xf32, @start> {
  // expected-remark @below {{edit of @s (exact); keep: none; recompute: @s, @h, @q; reuse: none}}
  // expected-remark @below {{cost: plan 9 tokens 12128 FLOPs; exact 9 tokens 12128 FLOPs; full 9 tokens 12128 FLOPs}}
  %e = kv.edit %m, %c[@s] = %t strategy <exact> : !model, !kv.cache<1x1x4xf32, @start>, tensor<5xi32>
  return %e : !kv.cache<1x1x4xf32, @start>
}

// -----

// An edit of the last segment (dynamic, 1 token after the edit) recomputes it
// alone.
//   plan = exact: [5,6) = 1 token, 1152 + 32·6 = 1344, + 160 = 1504
//   full: [0,6) = 6 tokens, 6912 + 32·21 = 7584, + 160 = 7744
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @end {
  kv.segment @s kind(system) tokens(3)
  kv.segment @h kind(history) tokens(2)
  kv.segment @q kind(user) tokens(?)
}
func.func @edit_end(%m: !model, %c: !kv.cache<1x1x4xf32, @end>, %t: tensor<1xi32>) -> !kv.cache<1x1x4xf32, @end> {
  // expected-remark @below {{edit of @q (cot_slice); keep: @s, @h; recompute: @q; reuse: none}}
  // expected-remark @below {{cost: plan 1 tokens 1504 FLOPs; exact 1 tokens 1504 FLOPs; full 6 tokens 7744 FLOPs}}
  %e = kv.edit %m, %c[@q] = %t strategy <cot_slice> : !model, !kv.cache<1x1x4xf32, @end>, tensor<1xi32>
  return %e : !kv.cache<1x1x4xf32, @end>
}

// -----

// Dynamic sizes: the plan is known, its cost a formula of the new @f's length
// y = len(@f') (the old length does not matter to cot_slice):
//   positions: @a [0,4) @f [4,4+y) @t [4+y,7+y) @b [7+y,12+y)
//   plan:  [4,7+y) = 3 + y tokens, (3+y)·1152 + 32·(5+...+(7+y)) + 5·160
//          = 4832 + 1392·y + 16·y²
// or, with dynamic-size=6 standing in for @f (6 tokens before and after):
//   positions: @a [0,4) @f [4,10) @t [10,13) @b [13,18)
//   plan:  [4,13) = 9 tokens, 9·1152 + 32·(5+...+13) = 12960, + 5·160 = 13760
//   exact: [4,18) = 14 tokens, 16128 + 32·161 = 21280, + 800 = 22080
//   full:  [0,18) = 18 tokens, 20736 + 32·171 = 26208, + 800 = 27008
// DYN: remark: cost: plan 9 tokens 13760 FLOPs; exact 14 tokens 22080 FLOPs; full 18 tokens 27008 FLOPs
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @dyn {
  kv.segment @a kind(system) tokens(4)
  kv.segment @f kind(fact) tokens(?)
  kv.segment @t kind(thought) tokens(3) deps(@f)
  kv.segment @b kind(tool) tokens(5)
}
func.func @edit_dyn(%m: !model, %c: !kv.cache<1x1x4xf32, @dyn>, %t: tensor<?xi32>) -> !kv.cache<1x1x4xf32, @dyn> {
  // expected-remark @below {{edit of @f (cot_slice); keep: @a; recompute: @f, @t; reuse: @b; reused segments shift by len(@f') - len(@f)}}
  // expected-remark @below {{cost: plan (3 + len(@f')) tokens (4832 + 1392*len(@f') + 16*len(@f')^2) FLOPs; exact (8 + len(@f')) tokens (12192 + 1552*len(@f') + 16*len(@f')^2) FLOPs; full (12 + len(@f')) tokens (17120 + 1552*len(@f') + 16*len(@f')^2) FLOPs}}
  %e = kv.edit %m, %c[@f] = %t strategy <cot_slice> : !model, !kv.cache<1x1x4xf32, @dyn>, tensor<?xi32>
  return %e : !kv.cache<1x1x4xf32, @dyn>
}

// -----

// A fraction repair recomputes ceil(0.5·5) = 3 tokens of @b [9,14), chosen at
// run time: the figure is an estimate (the deviation scan runs layers 0 and
// 1 of @b, here the model's only layer: 5·1152 + 32·60 = 7680; plus 3 tokens
// attending the mean (10 + 14)/2 = 12 keys,
// 3·(1152 + 384) = 4608), on top of recomputing @f, @t (6880) and the
// answer logits (800): 8 tokens, 19968 FLOPs.
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @frac {
  kv.segment @a kind(system) tokens(4)
  kv.segment @f kind(fact) tokens(2)
  kv.segment @t kind(thought) tokens(3) deps(@f)
  kv.segment @b kind(tool) tokens(5)
}
func.func @edit_frac(%m: !model, %c: !kv.cache<1x1x4xf32, @frac>, %t: tensor<2xi32>) -> !kv.cache<1x1x4xf32, @frac> {
  // expected-remark @below {{edit of @f (cot_slice, fraction = 0.5); keep: @a; recompute: @f, @t; reuse: @b; reused segments shift by len(@f') - len(@f)}}
  // expected-remark @below {{cost: plan 8 tokens 19968 FLOPs (estimated); exact 10 tokens 15360 FLOPs; full 14 tokens 20288 FLOPs}}
  %e = kv.edit %m, %c[@f] = %t strategy <cot_slice, fraction = 0.5> : !model, !kv.cache<1x1x4xf32, @frac>, tensor<2xi32>
  return %e : !kv.cache<1x1x4xf32, @frac>
}

// -----

// A deviation repair of @b [9,14) recomputes every token above the threshold:
// how many is unknown at compile time, so the plan counts the deviation scan
// (7680, as for fraction) on top of @f, @t (6880) and the answer logits
// (800): 5 tokens, 15360 FLOPs, plus 0 to 5 tokens chosen at run time, at
// most 5·(1152 + 32·12) = 7680 FLOPs.
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @dev {
  kv.segment @a kind(system) tokens(4)
  kv.segment @f kind(fact) tokens(2)
  kv.segment @t kind(thought) tokens(3) deps(@f)
  kv.segment @b kind(tool) tokens(5)
}
func.func @edit_deviation(%m: !model, %c: !kv.cache<1x1x4xf32, @dev>, %t: tensor<2xi32>) -> !kv.cache<1x1x4xf32, @dev> {
  // expected-remark @below {{edit of @f (cot_slice, deviation = 0.05); keep: @a; recompute: @f, @t; reuse: @b; reused segments shift by len(@f') - len(@f); their tokens whose relative layer-1 value deviation exceeds 0.05 are recomputed (how many is known at run time only)}}
  // expected-remark @below {{cost: plan 5 tokens 15360 FLOPs + 0 to 5 tokens (up to 7680 FLOPs) chosen at run time, unknown at compile time (estimated); exact 10 tokens 15360 FLOPs; full 14 tokens 20288 FLOPs}}
  %e = kv.edit %m, %c[@f] = %t strategy <cot_slice, deviation = 0.05> : !model, !kv.cache<1x1x4xf32, @dev>, tensor<2xi32>
  return %e : !kv.cache<1x1x4xf32, @dev>
}

// -----

// An erratum keeps the old context up to the answer (the old @f, of dynamic
// length x), then prefills the 3-token correction and the answer after it:
//   plan: correction [7+x,10+x) and @ans [10+x,12+x) = 5 tokens,
//         5·1152 + 32·(8+...+12 + 5·x) = 7360 + 160·x, + 2·160
//         = 7680 + 160·x (8000 for x = 2)
// Its reference is the edited context (@f of 4 tokens):
//   exact: [4,13) = 9 tokens, 10368 + 32·81 = 12960, + 320 = 13280
//   full:  [0,13) = 13 tokens, 14976 + 32·91 = 17888, + 320 = 18208
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @err {
  kv.segment @a kind(system) tokens(4)
  kv.segment @f kind(fact) tokens(?)
  kv.segment @t kind(thought) tokens(3) deps(@f)
  kv.segment @ans kind(answer) tokens(2) deps(@t)
}
func.func @edit_erratum(%m: !model, %c: !kv.cache<1x1x4xf32, @err>, %t: tensor<4xi32>, %fix: tensor<3xi32>) -> !kv.cache<1x1x4xf32, @err> {
  // expected-remark @below {{edit of @f (erratum); keep: @a, @f, @t (@f with its old tokens); correction @f.erratum prefilled before @ans; recompute: @ans; reuse: none}}
  // expected-remark @below {{cost: plan 5 tokens (7680 + 160*len(@f)) FLOPs; exact 9 tokens 13280 FLOPs; full 13 tokens 18208 FLOPs}}
  %e = kv.edit %m, %c[@f] = %t strategy <erratum> correction(%fix) : !model, !kv.cache<1x1x4xf32, @err>, tensor<4xi32>, tensor<3xi32>
  return %e : !kv.cache<1x1x4xf32, @err>
}

// -----

// An erratum whose correction has a run-time size z is priced as a formula of
// z: correction [9,9+z) and @ans [9+z,11+z) = 2 + z tokens; exact and full do
// not depend on it (with dynamic-size=6: correction [9,15) and @ans [15,17) = 8 tokens,
// 8·1152 + 32·(10+...+17) = 12672, + 320 = 12992; exact and full as above
// with the new @f of 2 tokens: [4,11) = 7 tokens 10176, [0,11) 15104).
// DYN: remark: cost: plan 8 tokens 12992 FLOPs; exact 7 tokens 10176 FLOPs; full 11 tokens 15104 FLOPs
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
kv.context @err {
  kv.segment @a kind(system) tokens(4)
  kv.segment @f kind(fact) tokens(2)
  kv.segment @t kind(thought) tokens(3) deps(@f)
  kv.segment @ans kind(answer) tokens(2) deps(@t)
}
func.func @edit_erratum_dyn(%m: !model, %c: !kv.cache<1x1x4xf32, @err>, %t: tensor<2xi32>, %fix: tensor<?xi32>) -> !kv.cache<1x1x4xf32, @err> {
  // expected-remark @below {{edit of @f (erratum); keep: @a, @f, @t (@f with its old tokens); correction @f.erratum prefilled before @ans; recompute: @ans; reuse: none}}
  // expected-remark @below {{cost: plan (2 + len(@f.erratum)) tokens (3296 + 1520*len(@f.erratum) + 16*len(@f.erratum)^2) FLOPs; exact 7 tokens 10176 FLOPs; full 11 tokens 15104 FLOPs}}
  %e = kv.edit %m, %c[@f] = %t strategy <erratum> correction(%fix) : !model, !kv.cache<1x1x4xf32, @err>, tensor<2xi32>, tensor<?xi32>
  return %e : !kv.cache<1x1x4xf32, @err>
}

// -----

// Compose: blocks whose lengths are known from the IR are placed after the
// context; without a repair composing computes nothing (the model of the
// prefills that built the views prices prefilling the block again); with a
// first_k repair the cost counts the recomputed tokens.
//   main: 4 tokens [0,4); block of 3 tokens prefilled alone at 0 -> shift 4.
//   repair first_k = 2: [4,6) = 2 tokens, 2·1152 + 32·(5+6) = 2656
//   exact (prefill the block again): [4,7) = 3 tokens, 3456 + 32·18 = 4032
//   full: [0,7) = 7 tokens, 8064 + 32·28 = 8960
!model = !kv.model<dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, vocab = 10>
func.func @compose(%m: !model, %main: tensor<4xi32>, %skill: tensor<3xi32>) -> !kv.cache<1x1x4xf32> {
  %c7 = arith.constant 7 : index
  %e = kv.empty : !kv.cache<1x1x4xf32>
  %c, %l = kv.prefill %m, %e, %main : !model, (!kv.cache<1x1x4xf32>), tensor<4xi32> -> !kv.cache<1x1x4xf32>, tensor<4x10xf32>
  %b, %l2 = kv.prefill %m, %e, %skill : !model, (!kv.cache<1x1x4xf32>), tensor<3xi32> -> !kv.cache<1x1x4xf32>, tensor<3x10xf32>
  // expected-remark @below {{compose: block of 3 tokens at position 4, shift 4}}
  // expected-remark @below {{cost: plan 0 tokens 0 FLOPs; exact 3 tokens 4032 FLOPs; full 7 tokens 8960 FLOPs}}
  %r = kv.compose %c, %b : !kv.cache<1x1x4xf32>, !kv.cache<1x1x4xf32>
  // expected-remark @below {{compose: block of 3 tokens at position 7, shift 7}}
  // expected-remark @below {{cost: plan 2 tokens 2656 FLOPs; exact 3 tokens 4032 FLOPs; full 7 tokens 8960 FLOPs}}
  %r2 = kv.compose %c, %b at %c7 repair <first_k = 2> using %m : !kv.cache<1x1x4xf32>, !kv.cache<1x1x4xf32>, !model
  return %r2 : !kv.cache<1x1x4xf32>
}
