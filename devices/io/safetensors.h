#pragma once
// Hugging Face safetensors files: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype (F32 F64 F16 BF16 I32 I64 U8 BOOL), shape and data_offsets, then the raw bytes.
//
//   auto weights = read_safetensors("model.safetensors");    // zero-copy: tensors view the mapped file
//   Tensor w = weights.at("encoder.weight");
//   write_safetensors("out.safetensors", {{"w", w}}, {{"format", "pt"}});
//
// Reading maps the file privately and every tensor adopts its slice of the mapping, which stays
// alive while any of them does; writing through a tensor never reaches the file. The header is
// validated (length, JSON, dtypes, shapes against offsets, offsets in bounds, no overlaps or holes)
// before any tensor is made: a corrupt file is an IOError naming the path, an unknown dtype a DTypeError.
#include <map>
#include <string>

#include "devices/tensor.h"

namespace troupe {

// metadata, when given, receives the optional "__metadata__" string map.
std::map<std::string, Tensor> read_safetensors(const std::string& path,
                                               std::map<std::string, std::string>* metadata = nullptr);
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace troupe
