//===- TokenizerImpl.cpp - What every kind of tokenizer shares --*- C++ -*-===//
//
// BOS and EOS around the text, and cutting special tokens out of it before
// the kind's own encoder sees it: each special token, the longest first,
// splits every stretch of plain text at its occurrences (left to right, not
// overlapping), as llama.cpp's tokenizer_st_partition does.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/tokenizer/TokenizerImpl.h"
#include "runtime/core/Support.h"

#include <algorithm>

using namespace kvrt;
using namespace kvrt::tok;

const std::string &Tokenizer::preTokenizer() const {
  static const std::string none;
  return none;
}

void Tokenizer::setPieces(const std::vector<std::string_view> &pieces,
                          std::vector<kvrt_token_type> pieceTypes,
                          std::vector<float> pieceScores) {
  size_t total = 0;
  for (std::string_view piece : pieces)
    total += piece.size();
  bytes.reserve(total);
  offsets.reserve(pieces.size() + 1);
  offsets.push_back(0);
  for (std::string_view piece : pieces) {
    bytes.append(piece);
    offsets.push_back(bytes.size());
  }
  types = std::move(pieceTypes);
  scores = std::move(pieceScores);
  for (int32_t id = 0; id < size(); ++id)
    if (types[id] == KVRT_TOKEN_CONTROL || types[id] == KVRT_TOKEN_UNKNOWN ||
        types[id] == KVRT_TOKEN_USER_DEFINED)
      specials.push_back(id);
  std::sort(specials.begin(), specials.end(), [&](int32_t a, int32_t b) {
    size_t la = piece(a).size(), lb = piece(b).size();
    return la != lb ? la > lb : a < b;
  });
}

kvrt_status Tokenizer::encode(std::string_view text, uint32_t flags,
                              std::vector<int32_t> &out) const {
  bool withBos = (flags & KVRT_ENCODE_BOS) ||
                 ((flags & KVRT_ENCODE_ADD_SPECIAL) && addBos);
  bool withEos = (flags & KVRT_ENCODE_EOS) ||
                 ((flags & KVRT_ENCODE_ADD_SPECIAL) && addEos);
  if (withBos && bos < 0)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                "kvrt_tokenizer_encode: BOS asked for, but the vocabulary has "
                "no BOS token");
  if (withEos && eos < 0)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                "kvrt_tokenizer_encode: EOS asked for, but the vocabulary has "
                "no EOS token");
  if (kvrt_status s = checkText(text))
    return s;
  out.clear();
  if (withBos)
    out.push_back(bos);

  // Fragments in order: stretches of text [begin, end), or a special token
  // (token >= 0).
  struct Fragment {
    size_t begin, end;
    int32_t token;
  };
  std::vector<Fragment> fragments, next;
  if (!text.empty())
    fragments.push_back({0, text.size(), -1});
  bool parseSpecial = flags & KVRT_ENCODE_SPECIAL;
  for (int32_t id : specials) {
    if (types[id] != KVRT_TOKEN_USER_DEFINED && !parseSpecial)
      continue;
    std::string_view special = piece(id);
    next.clear();
    bool found = false;
    for (const Fragment &f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t at = f.begin;
      while (at < f.end) {
        size_t match = text.substr(0, f.end).find(special, at);
        if (match == std::string_view::npos)
          break;
        found = true;
        if (match > at)
          next.push_back({at, match, -1});
        next.push_back({match, match + special.size(), id});
        at = match + special.size();
      }
      if (at < f.end)
        next.push_back({at, f.end, -1});
    }
    if (found)
      fragments.swap(next);
  }

  for (const Fragment &f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      continue;
    }
    if (kvrt_status s =
            encodePlain(text.substr(f.begin, f.end - f.begin), f.begin, out))
      return s;
  }
  if (withEos)
    out.push_back(eos);
  return KVRT_OK;
}
