// A structure-aware libFuzzer mutator for fuzz_npz (linked into the libFuzzer
// executable only; the replay build does not need it).
//
// Why: libzip is a system library without coverage instrumentation, so the
// fuzzer cannot see its progress through an archive, and almost any byte-level
// change to a member breaks its CRC-32, so libzip refuses the archive before
// read_npz ever gets to parse the member. Left alone, fuzz_npz plateaus on a
// handful of inputs.
//
// So, most of the time, this mutator parses the input as a zip archive (the
// central directory, stored and deflated members), mutates one member's
// contents or name with libFuzzer's own mutator (or adds, removes, reorders
// members, or switches a member between stored and deflated), and writes a
// well-formed archive back with correct CRCs, sizes and offsets. The rest of
// the time, and whenever the input does not parse as a plain zip, it falls
// back to byte-level mutation so that malformed archives are still fuzzed.
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

namespace {

struct Member {
  std::string name;
  std::string data;          // uncompressed
  std::uint16_t method = 0;  // 0 stored, 8 deflated
  std::uint16_t flags = 0;   // only bit 11 (UTF-8 name) is kept
};

// Larger members are not worth decompressing: inputs are at most -max_len.
constexpr std::size_t kMaxMemberBytes = 1 << 20;

std::uint32_t rd32(const std::uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (std::uint32_t{p[3]} << 24);
}
std::uint16_t rd16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
void wr16(std::string& s, std::uint32_t v) {
  s += static_cast<char>(v & 0xff);
  s += static_cast<char>((v >> 8) & 0xff);
}
void wr32(std::string& s, std::uint32_t v) {
  wr16(s, v & 0xffff);
  wr16(s, v >> 16);
}

bool inflate_raw(const std::uint8_t* in, std::size_t n, std::size_t expected, std::string& out) {
  if (expected > kMaxMemberBytes) return false;
  out.assign(expected, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return false;
  z.next_in = const_cast<Bytef*>(in);
  z.avail_in = static_cast<uInt>(n);
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  const bool ok = rc == Z_STREAM_END && z.total_out == expected;
  inflateEnd(&z);
  return ok;
}

std::string deflate_raw(const std::string& in) {
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Reads a plain (not zip64, single-disk) archive through its central
// directory. False on anything else; the caller then mutates bytes.
bool parse_zip(const std::uint8_t* d, std::size_t n, std::vector<Member>& members) {
  if (n < 22) return false;
  std::size_t eocd = n - 22;
  for (;; --eocd) {
    if (rd32(d + eocd) == 0x06054b50) break;
    if (eocd == 0 || n - eocd > 22 + 0xffff) return false;
  }
  const std::size_t count = rd16(d + eocd + 10);
  std::size_t p = rd32(d + eocd + 16);
  for (std::size_t i = 0; i < count; ++i) {
    if (p + 46 > n || rd32(d + p) != 0x02014b50) return false;
    Member m;
    m.flags = rd16(d + p + 8) & 0x0800;
    m.method = rd16(d + p + 10);
    const std::size_t csize = rd32(d + p + 20), usize = rd32(d + p + 24);
    const std::size_t name_len = rd16(d + p + 28), extra_len = rd16(d + p + 30),
                      comment_len = rd16(d + p + 32);
    const std::size_t local = rd32(d + p + 42);
    if (p + 46 + name_len > n) return false;
    m.name.assign(reinterpret_cast<const char*>(d + p + 46), name_len);
    p += 46 + name_len + extra_len + comment_len;
    if (local + 30 > n || rd32(d + local) != 0x04034b50) return false;
    const std::size_t start = local + 30 + rd16(d + local + 26) + rd16(d + local + 28);
    if (start > n || csize > n - start) return false;
    if (m.method == 0) {
      if (csize != usize) return false;
      m.data.assign(reinterpret_cast<const char*>(d + start), csize);
    } else if (m.method == 8) {
      if (!inflate_raw(d + start, csize, usize, m.data)) return false;
    } else {
      return false;
    }
    members.push_back(std::move(m));
  }
  return true;
}

std::string write_zip(const std::vector<Member>& members) {
  std::string out, central;
  for (const auto& m : members) {
    const std::string body = m.method == 8 ? deflate_raw(m.data) : m.data;
    const auto crc = static_cast<std::uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(m.data.data()), static_cast<uInt>(m.data.size())));
    const auto offset = static_cast<std::uint32_t>(out.size());
    auto common = [&](std::string& s) {
      wr16(s, 20);  // version needed
      wr16(s, m.flags);
      wr16(s, m.method);
      wr16(s, 0);       // time
      wr16(s, 0x5821);  // date: 2024-01-01
      wr32(s, crc);
      wr32(s, static_cast<std::uint32_t>(body.size()));
      wr32(s, static_cast<std::uint32_t>(m.data.size()));
      wr16(s, static_cast<std::uint32_t>(m.name.size()));
      wr16(s, 0);  // extra
    };
    wr32(out, 0x04034b50);
    common(out);
    out += m.name;
    out += body;
    wr32(central, 0x02014b50);
    wr16(central, 20);  // version made by
    common(central);
    wr16(central, 0);  // comment
    wr16(central, 0);  // disk
    wr16(central, 0);  // internal attributes
    wr32(central, 0);  // external attributes
    wr32(central, offset);
    central += m.name;
  }
  const auto cd_offset = static_cast<std::uint32_t>(out.size());
  out += central;
  wr32(out, 0x06054b50);
  wr16(out, 0);
  wr16(out, 0);
  wr16(out, static_cast<std::uint32_t>(members.size()));
  wr16(out, static_cast<std::uint32_t>(members.size()));
  wr32(out, static_cast<std::uint32_t>(central.size()));
  wr32(out, cd_offset);
  wr16(out, 0);
  return out;
}

// libFuzzer's mutator on a std::string, allowed to grow to `max`.
void mutate(std::string& s, std::size_t max) {
  if (s.empty()) s += 'x';  // libFuzzer mutates from at least one byte
  std::vector<std::uint8_t> buf(std::max(max, s.size()) + 1);
  std::memcpy(buf.data(), s.data(), s.size());
  const std::size_t n = LLVMFuzzerMutate(buf.data(), s.size(), std::max(max, s.size()));
  s.assign(reinterpret_cast<const char*>(buf.data()), n);
}

}  // namespace

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size,
                                               std::size_t max_size, unsigned int seed) {
  std::minstd_rand rng(seed);
  std::vector<Member> members;
  if (rng() % 4 == 0 || !parse_zip(data, size, members))
    return LLVMFuzzerMutate(data, size, max_size);

  // Room a member may grow into: what the archive leaves of max_size, less
  // the headers' overhead (deflate can also grow incompressible data).
  const std::size_t room = max_size > size + 256 ? max_size - size - 256 : 0;
  const unsigned action = rng() % 16;
  if (members.empty() || action == 15) {
    Member m;
    m.name = "m" + std::to_string(rng() % 100) + ".npy";
    m.data = members.empty() ? std::string("\x93NUMPY\x01\x00", 8) : members[0].data;
    members.push_back(std::move(m));
  } else {
    Member& m = members[rng() % members.size()];
    if (action < 10) {
      mutate(m.data, m.data.size() + room);
    } else if (action < 12) {
      mutate(m.name, std::min<std::size_t>(m.name.size() + room, 300));
    } else if (action == 12) {
      m.method = m.method == 8 ? 0 : 8;
    } else if (action == 13) {
      members.erase(members.begin() + static_cast<std::ptrdiff_t>(rng() % members.size()));
    } else {
      std::shuffle(members.begin(), members.end(), rng);
    }
  }
  const std::string out = write_zip(members);
  if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}
