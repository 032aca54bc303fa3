#pragma once
// Troupe in one include: the whole public API of every layer. Link troupe::models and
// troupe::dataflow (they bring troupe::net, troupe::actors and troupe::devices).
//
//   #include <troupe.h>
//   using namespace troupe;
//   Tensor y = relu(linear(x, w));                    // ops from the registry
//   auto f = fork([](const Tensor& t) { return softmax(t, -1); }, y);
//   Tensor p = wait(f);                               // fork/wait on actors
//
// Two values, two names: troupe::Value travels along a dataflow edge (any C++ value, in-process);
// troupe::net::WireValue is what a remote actor's call carries between ranks (a tree of
// none/bool/int/float/string/tensor/list).
//
// Namespaces: troupe (devices, actors, dataflow), troupe::net, troupe::models. Internal headers
// (kernels, the autograd tape's bookkeeping, wire frames, transport, collective algorithms) stay
// out; include them by path where a test or a tool needs them.

// devices/: tensors, dtypes, devices, the op registry and its typed front, autograd, files.
#include "devices/attrs.h"
#include "devices/autograd/autograd.h"
#include "devices/autograd/grad_mode.h"
#include "devices/backend.h"
#include "devices/captured_work.h"
#include "devices/determinism.h"
#include "devices/device.h"
#include "devices/dtype.h"
#include "devices/error.h"
#include "devices/io/npy.h"
#include "devices/io/safetensors.h"
#include "devices/lane.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "devices/registry.h"
#include "devices/shape.h"
#include "devices/storage.h"
#include "devices/sync.h"
#include "devices/tensor.h"
#include "devices/threads.h"
#ifdef TROUPE_HAVE_CUDA
#include "devices/cuda/stream.h"
#endif

// actors/: the runtime, fork/wait, promises, module actors, the profiler, metrics.
#include "actors/fork.h"
#include "actors/future.h"
#include "actors/observe/metrics.h"
#include "actors/observe/metrics_server.h"
#include "actors/module_actor.h"
#include "actors/observe/profiler.h"
#include "actors/promise.h"
#include "actors/runtime.h"

// dataflow/: graphs and their executor.
#include "dataflow/executor.h"
#include "dataflow/graph.h"
#include "dataflow/value.h"

// net/: process groups, p2p, collectives, the launcher, the job secret, remote actors and their meshes.
#include "net/collectives.h"
#include "net/job_secret.h"
#include "net/errors.h"
#include "net/bootstrap/launcher.h"
#include "net/process_group.h"
#include "net/remote/mesh.h"
#include "net/remote/remote_actor.h"
#include "net/seed_ring_all_reduce.h"
#include "net/work.h"

// models/: layers and training, data, the LSTM ensemble, the Transformer encoder, XLM-R.
#include "models/data/fashion_mnist.h"
#include "models/data/idx.h"
#include "models/data/loader.h"
#include "models/data/partition.h"
#include "models/lstm.h"
#include "models/nn/layers.h"
#include "models/nn/module.h"
#include "models/nn/net.h"
#include "models/nn/optimizer.h"
#include "models/train/checkpoint.h"
#include "models/train/gradient_reducer.h"
#include "models/train/wide_net.h"
#include "models/transformer/encoder.h"
#include "models/transformer/nested_tensor.h"
#include "models/xlmr/checkpoint.h"
#include "models/xlmr/embeddings.h"
#include "models/xlmr/sentencepiece_tokenizer.h"
#include "models/xlmr/xlmr.h"
#include "models/xlmr/xlmr_config.h"
#include "models/xlmr/xlmr_transform.h"
