#include "net/sealed_stream.h"

#include <openssl/evp.h>

#include <string>

#include "net/errors.h"
#include "net/wire_bytes.h"

namespace troupe::net {

namespace {

constexpr int kGcmNonceBytes = 12;

std::array<uint8_t, kGcmNonceBytes> nonce_of(uint64_t record) {
  std::array<uint8_t, kGcmNonceBytes> nonce{};
  wire::put<uint64_t>(nonce.data(), 0, record);
  return nonce;
}

EVP_CIPHER_CTX* keyed(const SealKey& key, bool encrypt) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  const int ok = ctx ? (encrypt ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr)
                                : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr))
                     : 0;
  if (ok != 1) {
    EVP_CIPHER_CTX_free(ctx);
    throw CommError("sealed records: OpenSSL cannot set up AES-256-GCM");
  }
  return ctx;
}

void check_count(uint64_t next) {
  if (next >= kSealedRecordsMax)
    throw CommError("sealed records: this connection's key sealed " + std::to_string(kSealedRecordsMax) +
                    " records, the most one key may: the connection closes");
}

}  // namespace

uint32_t sealed_length(const uint8_t* length_field) {
  const uint32_t bytes = wire::get<uint32_t>(length_field, 0);
  if (bytes > kSealedRecordMax)
    throw CommError("sealed records: a record of " + std::to_string(bytes) + " bytes, at most " +
                    std::to_string(kSealedRecordMax));
  return bytes;
}

RecordSealer::RecordSealer(const SealKey& key, uint64_t first_record)
    : context_(keyed(key, true)), next_(first_record) {}

RecordSealer::~RecordSealer() { EVP_CIPHER_CTX_free(static_cast<EVP_CIPHER_CTX*>(context_)); }

void RecordSealer::seal(std::span<const std::span<const uint8_t>> pieces, std::vector<uint8_t>& out) {
  size_t bytes = 0;
  for (const auto& p : pieces) bytes += p.size();
  const size_t at = out.size();
  if (bytes <= kSealedRecordMax) out.resize(at + sealed_record_bytes(bytes));  // past it seal_into refuses
  try {
    seal_into(pieces, std::span<uint8_t>(out).subspan(at));
  } catch (const CommError&) {
    out.resize(at);
    throw;
  }
}

size_t RecordSealer::seal_into(std::span<const std::span<const uint8_t>> pieces, std::span<uint8_t> out) {
  check_count(next_);
  size_t bytes = 0;
  for (const auto& p : pieces) bytes += p.size();
  if (bytes > kSealedRecordMax)
    throw CommError("sealed records: a record of " + std::to_string(bytes) + " bytes, at most " +
                    std::to_string(kSealedRecordMax));
  if (out.size() < sealed_record_bytes(bytes))
    throw CommError("sealed records: " + std::to_string(out.size()) + " bytes of room for a record of " +
                    std::to_string(sealed_record_bytes(bytes)));
  auto* ctx = static_cast<EVP_CIPHER_CTX*>(context_);
  const auto nonce = nonce_of(next_++);
  uint8_t* length_field = out.data();
  wire::put<uint32_t>(length_field, 0, static_cast<uint32_t>(bytes));
  uint8_t* cipher = length_field + kSealedLengthBytes;
  int n = 0;
  bool ok = EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data()) == 1 &&
            EVP_EncryptUpdate(ctx, nullptr, &n, length_field, kSealedLengthBytes) == 1;
  for (const auto& p : pieces) {
    if (p.empty()) continue;
    ok = ok && EVP_EncryptUpdate(ctx, cipher, &n, p.data(), static_cast<int>(p.size())) == 1;
    cipher += n;
  }
  ok = ok && EVP_EncryptFinal_ex(ctx, cipher, &n) == 1 &&
       EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kSealTagBytes, cipher + n) == 1;
  if (!ok) throw CommError("sealed records: OpenSSL failed to seal a record");
  return sealed_record_bytes(bytes);
}

RecordOpener::RecordOpener(const SealKey& key, uint64_t first_record)
    : context_(keyed(key, false)), next_(first_record) {}

RecordOpener::~RecordOpener() { EVP_CIPHER_CTX_free(static_cast<EVP_CIPHER_CTX*>(context_)); }

void RecordOpener::open(const uint8_t* length_field, std::span<const uint8_t> ciphertext_and_tag, uint8_t* out) {
  check_count(next_);
  const uint32_t bytes = sealed_length(length_field);
  if (ciphertext_and_tag.size() != size_t(bytes) + kSealTagBytes)
    throw CommError("sealed records: a record of " + std::to_string(ciphertext_and_tag.size()) +
                    " bytes where its length says " + std::to_string(bytes + kSealTagBytes));
  auto* ctx = static_cast<EVP_CIPHER_CTX*>(context_);
  const auto nonce = nonce_of(next_++);
  int n = 0, last = 0;
  const bool ok = EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data()) == 1 &&
                  EVP_DecryptUpdate(ctx, nullptr, &n, length_field, kSealedLengthBytes) == 1 &&
                  (bytes == 0 || EVP_DecryptUpdate(ctx, out, &n, ciphertext_and_tag.data(), int(bytes)) == 1) &&
                  EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kSealTagBytes,
                                      const_cast<uint8_t*>(ciphertext_and_tag.data() + bytes)) == 1 &&
                  EVP_DecryptFinal_ex(ctx, out + (bytes == 0 ? 0 : n), &last) == 1;
  if (!ok)
    throw CommError("sealed record " + std::to_string(next_ - 1) +
                    " failed authentication (altered, replayed, reordered, or sealed with another key)");
}

}  // namespace troupe::net
