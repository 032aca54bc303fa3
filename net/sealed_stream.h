#pragma once
// Sealed records: the AEAD of an encrypted job's direct links and stripes (TROUPE_ENCRYPT=1,
// `troupe launch --encrypt`). Each direction of a connection has its own key from the handshake
// (handshake.h: SessionKeys) and its own record counter, which is the nonce: a sealer and the
// opener at the other end count the same records in the same order, so no nonce ever goes twice
// under one key, and a record dropped, repeated, reordered or altered fails to open.
//
//   RecordSealer seal(session.send);                      // this end's writing half
//   std::vector<uint8_t> wire;
//   const std::span<const uint8_t> pieces[] = {header, payload};
//   seal.seal(pieces, wire);                              // appends length, ciphertext, tag
//   // or, into room kept across records: n = seal.seal_into(pieces, kept); n == sealed_record_bytes(...)
//   RecordOpener open(peer_session.receive);              // the other end's reading half
//   const uint32_t bytes = sealed_length(wire.data());    // CommError past kSealedRecordMax
//   std::vector<uint8_t> plain(bytes);
//   open.open(wire.data(), {wire.data() + kSealedLengthBytes, bytes + kSealTagBytes}, plain.data());
//
// Wire: `u32 ciphertext bytes` (little-endian, authenticated as associated data), the ciphertext,
// a 16-byte tag. AES-256-GCM (OpenSSL EVP: 2.3-2.6 GB/s on one core of the EPYC we measure on,
// sealing 64 MiB from memory in 64-256 KiB records; libsodium's AES-GCM and ChaCha20-Poly1305 were
// 0.6x and 0.4x of it, libgcrypt 1.10's AES-GCM 1.15x: not worth a second crypto library); the
// 96-bit nonce is the record's number, little-endian. A key seals at most kSealedRecordsMax records: past that the connection refuses
// (CommError) and the job's frames take the other paths.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace troupe::net {

inline constexpr size_t kSealedLengthBytes = 4;
inline constexpr size_t kSealTagBytes = 16;
inline constexpr uint32_t kSealedRecordMax = 16 << 20;            // the most plaintext one record holds
inline constexpr uint64_t kSealedRecordsMax = uint64_t(1) << 32;  // records under one key

// Bytes a record holding `plain` bytes takes on the wire: length field, ciphertext, tag.
constexpr size_t sealed_record_bytes(size_t plain) { return kSealedLengthBytes + plain + kSealTagBytes; }

using SealKey = std::array<uint8_t, 32>;

// The ciphertext bytes a record's length field announces. CommError past kSealedRecordMax.
uint32_t sealed_length(const uint8_t* length_field);

// The writing half of one direction. Not thread-safe: one writer at a time.
class RecordSealer {
 public:
  // first_record: the counter's start (0 on a connection; tests start near the limit).
  explicit RecordSealer(const SealKey& key, uint64_t first_record = 0);
  ~RecordSealer();
  RecordSealer(const RecordSealer&) = delete;
  RecordSealer& operator=(const RecordSealer&) = delete;

  // Appends one record holding the pieces' bytes, one after the other, to out. CommError when the
  // pieces hold more than kSealedRecordMax bytes or the key sealed kSealedRecordsMax records.
  void seal(std::span<const std::span<const uint8_t>> pieces, std::vector<uint8_t>& out);
  void seal(std::span<const uint8_t> piece, std::vector<uint8_t>& out) { seal({&piece, 1}, out); }
  // The same into out, which has room for sealed_record_bytes(the pieces' bytes): a buffer kept
  // across records is neither zeroed nor grown per record. Returns the bytes written.
  size_t seal_into(std::span<const std::span<const uint8_t>> pieces, std::span<uint8_t> out);
  uint64_t records() const { return next_; }  // sealed so far: the next record's nonce

 private:
  void* context_;  // EVP_CIPHER_CTX, keyed once
  uint64_t next_;
};

// The reading half of one direction. Not thread-safe: one reader at a time.
class RecordOpener {
 public:
  explicit RecordOpener(const SealKey& key, uint64_t first_record = 0);
  ~RecordOpener();
  RecordOpener(const RecordOpener&) = delete;
  RecordOpener& operator=(const RecordOpener&) = delete;

  // Opens the next record: its length field, then its ciphertext and tag, decrypted into out
  // (ciphertext bytes). CommError when it fails authentication (altered, out of order, another
  // key): out then holds garbage and the connection must close. The caller names the peer.
  void open(const uint8_t* length_field, std::span<const uint8_t> ciphertext_and_tag, uint8_t* out);
  uint64_t records() const { return next_; }

 private:
  void* context_;
  uint64_t next_;
};

}  // namespace troupe::net
