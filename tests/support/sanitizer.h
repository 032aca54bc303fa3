#pragma once
// Whether this test binary is built with ThreadSanitizer (scripts/sanitize.sh tsan). Under it a
// test may run one case of several that differ only in data or placement, not in threads: the
// normal build runs them all, and TSan checks how threads meet, which the one case shows.
//
//   const size_t cases = kUnderThreadSanitizer ? 1 : layouts.size();

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderThreadSanitizer = true;
#elif defined(__has_feature)
inline constexpr bool kUnderThreadSanitizer = __has_feature(thread_sanitizer);
#else
inline constexpr bool kUnderThreadSanitizer = false;
#endif
