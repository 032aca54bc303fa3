// libFuzzer target for sealed records (net/sealed_stream.h), the reading half of an encrypted job's
// direct links and stripes: what a peer's bytes can do to it. Whatever the bytes, each record gives
// its plaintext or throws CommError; never crash or hang, and nothing opens that was not sealed under
// the key, in that place of the stream, unaltered.
// Input: byte 0 % 2 picks the mode.
//   0, the wire: the rest read as a receiver reads a connection, record after record (a length field,
//      then that many ciphertext bytes and a tag), under a fixed key, until one fails or the bytes end
//      (a record cut short waits for more: none come).
//   1, round trip: byte 1 picks a bit, the rest is a record's plaintext. Sealed, it opens to the same
//      bytes; with that bit flipped (length field, ciphertext or tag), sent again (replayed), or
//      opened under another key, it must fail.
//   build/bin/sealed_fuzz -max_total_time=60 tests/fuzz/corpus/sealed
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "net/errors.h"
#include "net/sealed_stream.h"

namespace {

using troupe::net::kSealedLengthBytes;
using troupe::net::kSealTagBytes;

troupe::net::SealKey key(uint8_t first) {
  troupe::net::SealKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(first + i);  // make_corpus.py's
  return k;
}

void read_wire(std::span<const uint8_t> wire) {
  troupe::net::RecordOpener opener(key(0));
  std::vector<uint8_t> plain;
  while (wire.size() >= kSealedLengthBytes) {
    const uint32_t bytes = troupe::net::sealed_length(wire.data());
    if (wire.size() - kSealedLengthBytes < size_t(bytes) + kSealTagBytes) return;
    plain.resize(bytes);
    opener.open(wire.data(), wire.subspan(kSealedLengthBytes, bytes + kSealTagBytes), plain.data());
    wire = wire.subspan(kSealedLengthBytes + bytes + kSealTagBytes);
  }
}

// True when `record` (one whole record) opens under the key, as record `number` of its stream.
bool opens(const std::vector<uint8_t>& record, uint8_t key_first, uint64_t number) {
  troupe::net::RecordOpener opener(key(key_first), number);
  std::vector<uint8_t> plain(record.size());
  try {
    opener.open(record.data(), {record.data() + kSealedLengthBytes, record.size() - kSealedLengthBytes}, plain.data());
    return true;
  } catch (const troupe::CommError&) {
    return false;
  }
}

void round_trip(uint8_t bit, std::span<const uint8_t> plain) {
  if (plain.size() > troupe::net::kSealedRecordMax) return;
  troupe::net::RecordSealer sealer(key(0));
  std::vector<uint8_t> record;
  sealer.seal(plain, record);
  if (record.size() != kSealedLengthBytes + plain.size() + kSealTagBytes) std::abort();
  troupe::net::RecordOpener opener(key(0));
  std::vector<uint8_t> opened(plain.size());
  opener.open(record.data(), {record.data() + kSealedLengthBytes, record.size() - kSealedLengthBytes}, opened.data());
  if (!plain.empty() && std::memcmp(opened.data(), plain.data(), plain.size()) != 0) std::abort();
  if (opens(record, 0, 1)) std::abort();   // the same record again, where the stream's second belongs
  if (opens(record, 32, 0)) std::abort();  // another connection's key
  std::vector<uint8_t> altered = record;
  const size_t at = (size_t(bit) * 131) % (altered.size() * 8);
  altered[at / 8] ^= static_cast<uint8_t>(1u << (at % 8));
  if (opens(altered, 0, 0)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  try {
    if (data[0] % 2 == 0) read_wire({data + 1, size - 1});
    else if (size >= 2) round_trip(data[1], {data + 2, size - 2});
  } catch (const troupe::CommError&) {
  }
  return 0;
}
