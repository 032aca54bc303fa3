#pragma once
// Weight names of XLM-R checkpoints. Troupe's XLMR keeps torchtext's names (XLMR_BASE_ENCODER,
// RobertaClassificationHead); a Hugging Face file (XLMRobertaForSequenceClassification,
// XLMRobertaForMaskedLM, XLMRobertaModel) is renamed when loaded. Per layer N:
//
//   torchtext (Troupe)                                     Hugging Face
//   encoder.transformer.token_embedding.weight             roberta.embeddings.word_embeddings.weight
//   encoder.transformer.positional_embedding.embedding.weight
//                                                          roberta.embeddings.position_embeddings.weight
//                                                          + roberta.embeddings.token_type_embeddings.weight[0]
//   encoder.transformer.embedding_layer_norm.{weight,bias} roberta.embeddings.LayerNorm.{weight,bias}
//   encoder.transformer.layers.layers.N.
//     self_attn.in_proj_{weight,bias}                      roberta.encoder.layer.N.attention.self.
//                                                            {query,key,value}.{weight,bias}, stacked q;k;v
//     self_attn.out_proj.{weight,bias}                     ...attention.output.dense.{weight,bias}
//     norm1.{weight,bias}                                  ...attention.output.LayerNorm.{weight,bias}
//     linear1.{weight,bias}                                ...intermediate.dense.{weight,bias}
//     linear2.{weight,bias}                                ...output.dense.{weight,bias}
//     norm2.{weight,bias}                                  ...output.LayerNorm.{weight,bias}
//   head.dense.{weight,bias}                               classifier.dense.{weight,bias}
//   head.out_proj.{weight,bias}                            classifier.out_proj.{weight,bias}
//
// Hugging Face adds token type 0's embedding to every token; since every token also takes exactly
// one position row, that row is folded into the position table (an exact rewrite). Recognised and
// skipped, since this model has no use for them: roberta.embeddings.position_ids,
// roberta.pooler.*, lm_head.* (the masked-LM head). The classification head is optional in
// both namings: a checkpoint without any head weight (a bare encoder) leaves the head as it was.
//
//   auto file = read_safetensors("xlmr.safetensors");
//   auto state = xlmr_torchtext_state(file, XLMRConfig::base());   // checked, renamed, f32
#include <map>
#include <string>

#include "devices/tensor.h"
#include "models/xlmr/xlmr_config.h"

namespace troupe::models {

enum class XLMRNaming { torchtext, hugging_face };
const char* name(XLMRNaming naming);

// Hugging Face when any key starts with "roberta." or "classifier.", else torchtext.
XLMRNaming detect_xlmr_naming(const std::map<std::string, Tensor>& checkpoint);

// Every weight of the model under a naming, with its shape.
std::map<std::string, Shape> xlmr_weight_shapes(const XLMRConfig& config, XLMRNaming naming, bool with_head = true);

// The checkpoint's weights under torchtext's names, floating dtypes converted to f32; the head's
// only when the checkpoint has one. ValueError listing every missing and every unknown key,
// ShapeError naming a key with its shape and the expected one, DTypeError for a non-floating weight.
std::map<std::string, Tensor> xlmr_torchtext_state(const std::map<std::string, Tensor>& checkpoint,
                                                   const XLMRConfig& config);

}  // namespace troupe::models
