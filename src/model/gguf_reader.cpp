// The GGUF reader. A file is mapped (or read) whole, then parsed by a cursor
// that bounds-checks every read: the file may be hostile, so each count and
// length is checked against the bytes that remain before anything is
// allocated or looped over, and every failure becomes a gguf::Error that
// names the file and the byte offset of the offending field.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "model/gguf.h"

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace kiln::gguf {
namespace {

// Arrays may nest (an array of arrays of ...); recursion depth is bounded so a
// hostile file cannot exhaust the stack. Real files nest at most once.
constexpr int kMaxArrayDepth = 8;
// Every metadata value becomes a Value object (~48 bytes) whatever its size on
// disk, so a file of one-byte array items could make us use ~50x its size in
// memory. Real files hold at most a few million values (a 262k-token
// vocabulary is ~800k: tokens, scores, types); 16M bounds a hostile file to
// well under 1 GiB.
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 24;

// Smallest encodings, used to bound counts before looping: a key/value pair
// is at least an empty key (8), a type (4) and a one-byte value; a tensor
// info at least an empty name (8), n_dims (4), one dim (8), type (4), offset (8).
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

uint64_t min_value_bytes(ValueType t) {
    switch (t) {
        case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
        case ValueType::UINT16: case ValueType::INT16: return 2;
        case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
        case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
        case ValueType::STRING: return 8;       // the length
        case ValueType::ARRAY: return 4 + 8;    // element type and count
    }
    return 1;
}

bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// Rounds up to a power-of-two alignment; callers ensure no overflow (x is a
// file offset, far below 2^63, and a <= 2^31).
uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

// ---------------------------------------------------------------------------
// Storage: the bytes of a file, either mapped or owned.

class Storage {
public:
    Storage() = default;
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;
    ~Storage() { unmap(); }

    const uint8_t* data() const { return mapped_ ? static_cast<const uint8_t*>(map_addr_) : owned_.data(); }
    uint64_t size() const { return mapped_ ? map_len_ : owned_.size(); }
    bool mapped() const { return mapped_; }

    void adopt(std::vector<uint8_t> bytes) {
        unmap();
        owned_ = std::move(bytes);
    }

    // Loads `path`, mapping it if asked and possible, reading it otherwise.
    void load(const std::string& path, bool try_mmap);

private:
    void unmap();

    std::vector<uint8_t> owned_;
    void* map_addr_ = nullptr;
    size_t map_len_ = 0;
    bool mapped_ = false;
#ifdef _WIN32
    HANDLE mapping_ = nullptr;
#endif
};

#ifdef _WIN32

std::wstring widen(const std::string& path) {
    // Paths are UTF-8 throughout kiln; Windows wants UTF-16.
    if (path.empty()) return {};
    const int n = MultiByteToWideChar(CP_UTF8, 0, path.data(), static_cast<int>(path.size()), nullptr, 0);
    if (n <= 0) throw Error(path + ": the path is not valid UTF-8");
    std::wstring w(static_cast<size_t>(n), L'\0');
    MultiByteToWideChar(CP_UTF8, 0, path.data(), static_cast<int>(path.size()), w.data(), n);
    return w;
}

std::string win_error_text(DWORD err) {
    char* msg = nullptr;
    const DWORD n = FormatMessageA(FORMAT_MESSAGE_ALLOCATE_BUFFER | FORMAT_MESSAGE_FROM_SYSTEM |
                                       FORMAT_MESSAGE_IGNORE_INSERTS,
                                   nullptr, err, 0, reinterpret_cast<LPSTR>(&msg), 0, nullptr);
    std::string s = n && msg ? std::string(msg, n) : "error " + std::to_string(err);
    if (msg) LocalFree(msg);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    return s;
}

void Storage::load(const std::string& path, bool try_mmap) {
    const std::wstring wpath = widen(path);
    // FILE_SHARE_DELETE: as on POSIX, a model that is open (even mapped) can still be renamed,
    // deleted or replaced by a writer's rename-into-place; the mapping keeps the old contents.
    HANDLE file = CreateFileW(wpath.c_str(), GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE, nullptr,
                              OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
    if (file == INVALID_HANDLE_VALUE) throw Error(path + ": cannot open: " + win_error_text(GetLastError()));
    struct Closer {
        HANDLE h;
        ~Closer() { CloseHandle(h); }
    } closer{file};

    LARGE_INTEGER size;
    if (!GetFileSizeEx(file, &size)) throw Error(path + ": cannot get the size: " + win_error_text(GetLastError()));
    const auto n = static_cast<uint64_t>(size.QuadPart);
    if (n > std::numeric_limits<size_t>::max()) throw Error(path + ": the file is too large for this machine");

    // An empty file cannot be mapped; it is read (as nothing) and then
    // rejected by the parser with a proper message.
    if (try_mmap && n > 0) {
        HANDLE mapping = CreateFileMappingW(file, nullptr, PAGE_READONLY, 0, 0, nullptr);
        if (mapping) {
            void* addr = MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0);
            if (addr) {
                unmap();
                mapping_ = mapping;
                map_addr_ = addr;
                map_len_ = static_cast<size_t>(n);
                mapped_ = true;
                return;
            }
            CloseHandle(mapping);
        }
        // Fall through: mapping can fail (e.g. on some network shares) where reading works.
    }

    std::vector<uint8_t> bytes(static_cast<size_t>(n));
    size_t done = 0;
    while (done < bytes.size()) {
        const DWORD chunk = static_cast<DWORD>(std::min<size_t>(bytes.size() - done, 1u << 30));
        DWORD got = 0;
        if (!ReadFile(file, bytes.data() + done, chunk, &got, nullptr))
            throw Error(path + ": read failed: " + win_error_text(GetLastError()));
        if (got == 0) throw Error(path + ": the file shrank while being read");
        done += got;
    }
    adopt(std::move(bytes));
}

void Storage::unmap() {
    if (mapped_) {
        UnmapViewOfFile(map_addr_);
        CloseHandle(mapping_);
        mapping_ = nullptr;
        map_addr_ = nullptr;
        map_len_ = 0;
        mapped_ = false;
    }
}

#else  // POSIX

// std::error_code renders errno text without strerror's shared buffer.
std::string os_error_text(int err) { return std::error_code(err, std::generic_category()).message(); }

void Storage::load(const std::string& path, bool try_mmap) {
    int fd;
    do {
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) throw Error(path + ": cannot open: " + os_error_text(errno));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};

    struct stat st {};
    if (::fstat(fd, &st) != 0) throw Error(path + ": cannot stat: " + os_error_text(errno));
    if (!S_ISREG(st.st_mode)) throw Error(path + ": not a regular file");
    const auto n = static_cast<uint64_t>(st.st_size);
    if (n > std::numeric_limits<size_t>::max()) throw Error(path + ": the file is too large for this machine");

    // An empty file cannot be mapped; it is read (as nothing) and then
    // rejected by the parser with a proper message.
    if (try_mmap && n > 0) {
        void* addr = ::mmap(nullptr, static_cast<size_t>(n), PROT_READ, MAP_PRIVATE, fd, 0);
        if (addr != MAP_FAILED) {
            unmap();
            map_addr_ = addr;
            map_len_ = static_cast<size_t>(n);
            mapped_ = true;
            return;
        }
        // Fall through: mapping can fail (e.g. some FUSE file systems) where reading works.
    }

    std::vector<uint8_t> bytes(static_cast<size_t>(n));
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
        if (got < 0) {
            if (errno == EINTR) continue;
            throw Error(path + ": read failed: " + os_error_text(errno));
        }
        if (got == 0) throw Error(path + ": the file shrank while being read");
        done += static_cast<size_t>(got);
    }
    adopt(std::move(bytes));
}

void Storage::unmap() {
    if (mapped_) {
        ::munmap(map_addr_, map_len_);
        map_addr_ = nullptr;
        map_len_ = 0;
        mapped_ = false;
    }
}

#endif

// ---------------------------------------------------------------------------
// Cursor: bounds-checked little-endian reads with positioned errors.

class Cursor {
public:
    Cursor(const uint8_t* data, uint64_t size, const std::string& name) : data_(data), size_(size), name_(name) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }

    [[noreturn]] void fail_at(uint64_t at, const std::string& what) const {
        throw Error(name_ + ": at byte " + std::to_string(at) + ": " + what);
    }

    void need(uint64_t n, std::string_view what) const {
        if (n > remaining())
            fail_at(pos_, "unexpected end of file reading " + std::string(what) + " (needs " + std::to_string(n) +
                              " bytes, " + std::to_string(remaining()) + " left)");
    }

    // Assembled byte by byte so the reader is correct on any host byte order
    // and never performs a misaligned load.
    template <typename T>
    T read(std::string_view what) {
        static_assert(std::is_unsigned_v<T>);
        need(sizeof(T), what);
        T v = 0;
        for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(data_[pos_ + i]) << (8 * i));
        pos_ += sizeof(T);
        return v;
    }
    uint8_t u8(std::string_view what) { return read<uint8_t>(what); }
    uint16_t u16(std::string_view what) { return read<uint16_t>(what); }
    uint32_t u32(std::string_view what) { return read<uint32_t>(what); }
    uint64_t u64(std::string_view what) { return read<uint64_t>(what); }

    std::string string(std::string_view what) {
        const uint64_t at = pos_;
        const uint64_t len = u64(what);
        if (len > remaining())
            fail_at(at, std::string(what) + ": string length " + std::to_string(len) + " exceeds the " +
                            std::to_string(remaining()) + " bytes left in the file");
        std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
        pos_ += len;
        return s;
    }

private:
    const uint8_t* data_;
    uint64_t size_;
    uint64_t pos_ = 0;
    const std::string& name_;
};

}  // namespace

// ---------------------------------------------------------------------------

struct File::Impl {
    std::string path;
    Storage storage;
    uint32_t version = 0;
    uint32_t alignment = kDefaultAlignment;
    uint64_t data_offset = 0;
    std::vector<KeyValue> kv;
    std::map<std::string, size_t, std::less<>> kv_index;  // transparent: lookups by string_view
    std::vector<TensorInfo> tensors;
    std::map<std::string, size_t, std::less<>> tensor_index;

    void parse();
};

namespace {

// Parses metadata values; counts every value so that the total stays bounded.
class ValueParser {
public:
    explicit ValueParser(Cursor& c) : c_(c) {}

    ValueType value_type(std::string_view what) {
        const uint64_t at = c_.pos();
        const uint32_t t = c_.u32(what);
        if (t > static_cast<uint32_t>(ValueType::FLOAT64)) c_.fail_at(at, std::string(what) + ": value type id " + std::to_string(t) + " is unknown");
        return static_cast<ValueType>(t);
    }

    Value value(ValueType t, const std::string& what, int depth) {
        if (++n_values_ > kMaxMetadataValues)
            c_.fail_at(c_.pos(), what + ": the metadata holds more than " + std::to_string(kMaxMetadataValues) +
                                     " values; refusing to load it");
        switch (t) {
            case ValueType::UINT8: return Value::u8(c_.u8(what));
            case ValueType::INT8: return Value::i8(static_cast<int8_t>(c_.u8(what)));
            case ValueType::UINT16: return Value::u16(c_.u16(what));
            case ValueType::INT16: return Value::i16(static_cast<int16_t>(c_.u16(what)));
            case ValueType::UINT32: return Value::u32(c_.u32(what));
            case ValueType::INT32: return Value::i32(static_cast<int32_t>(c_.u32(what)));
            case ValueType::UINT64: return Value::u64(c_.u64(what));
            case ValueType::INT64: return Value::i64(static_cast<int64_t>(c_.u64(what)));
            case ValueType::FLOAT32: return Value::f32(std::bit_cast<float>(c_.u32(what)));
            case ValueType::FLOAT64: return Value::f64(std::bit_cast<double>(c_.u64(what)));
            case ValueType::BOOL: {
                const uint64_t at = c_.pos();
                const uint8_t b = c_.u8(what);
                if (b > 1) c_.fail_at(at, what + ": bool byte is " + std::to_string(b) + ", not 0 or 1");
                return Value::boolean(b != 0);
            }
            case ValueType::STRING: return Value::str(c_.string(what));
            case ValueType::ARRAY: return array(what, depth);
        }
        c_.fail_at(c_.pos(), what + ": value type id " + std::to_string(static_cast<uint32_t>(t)) + " is unknown");
    }

private:
    Value array(const std::string& what, int depth) {
        const uint64_t at = c_.pos();
        if (depth >= kMaxArrayDepth)
            c_.fail_at(at, what + ": arrays nested more than " + std::to_string(kMaxArrayDepth) + " deep");
        const ValueType elem = value_type(what + ": array element type");
        const uint64_t count_at = c_.pos();
        const uint64_t count = c_.u64(what + ": array length");
        const uint64_t min_bytes = min_value_bytes(elem);
        // Checked before reserving or looping, so a hostile count costs nothing.
        if (count > c_.remaining() / min_bytes)
            c_.fail_at(count_at, what + ": array of " + std::to_string(count) + " " + std::string(value_type_name(elem)) +
                                     " values needs at least " + std::to_string(min_bytes) + " bytes each, but only " +
                                     std::to_string(c_.remaining()) + " bytes are left in the file");
        if (count > kMaxMetadataValues - std::min(n_values_, kMaxMetadataValues))
            c_.fail_at(count_at, what + ": the metadata holds more than " + std::to_string(kMaxMetadataValues) +
                                     " values; refusing to load it");
        Array a;
        a.elem_type = elem;
        a.items.reserve(static_cast<size_t>(count));
        for (uint64_t i = 0; i < count; ++i) a.items.push_back(value(elem, what, depth + 1));
        return Value{ValueType::ARRAY, std::move(a)};
    }

    Cursor& c_;
    uint64_t n_values_ = 0;
};

}  // namespace

void File::Impl::parse() {
    Cursor c(storage.data(), storage.size(), path);

    const uint32_t magic = c.u32("the magic number");
    if (magic != kMagic) {
        char got[5] = {};
        for (int i = 0; i < 4; ++i) {
            const char ch = static_cast<char>((magic >> (8 * i)) & 0xFF);
            got[i] = (ch >= 0x20 && ch < 0x7F) ? ch : '?';
        }
        c.fail_at(0, "not a GGUF file (magic is \"" + std::string(got) + "\", expected \"GGUF\")");
    }

    version = c.u32("the version");
    if (version != 2 && version != 3) {
        std::string why = "GGUF version " + std::to_string(version) + " is not supported (kiln reads versions 2 and 3)";
        if (version == 1) why += "; version 1 files predate 64-bit counts, re-convert the model with a current converter";
        if (version > 3 && (version & 0xFFFF) == 0) why += "; this looks like a big-endian GGUF file";
        c.fail_at(4, why);
    }

    const uint64_t n_tensors_at = c.pos();
    const uint64_t n_tensors = c.u64("the tensor count");
    const uint64_t n_kv_at = c.pos();
    const uint64_t n_kv = c.u64("the metadata key/value count");
    // Both counts are bounded by the bytes left, before anything is reserved.
    if (n_tensors > c.remaining() / kMinTensorInfoBytes)
        c.fail_at(n_tensors_at, "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                                    std::to_string(c.remaining()) + " bytes left in the file");
    if (n_kv > c.remaining() / kMinKvBytes)
        c.fail_at(n_kv_at, "metadata key/value count " + std::to_string(n_kv) + " cannot fit in the " +
                               std::to_string(c.remaining()) + " bytes left in the file");
    if (n_tensors * kMinTensorInfoBytes + n_kv * kMinKvBytes > c.remaining())
        c.fail_at(n_tensors_at, std::to_string(n_tensors) + " tensors and " + std::to_string(n_kv) +
                                    " metadata keys cannot fit in the " + std::to_string(c.remaining()) +
                                    " bytes left in the file");

    // --- metadata
    ValueParser vp(c);
    kv.reserve(static_cast<size_t>(n_kv));
    for (uint64_t i = 0; i < n_kv; ++i) {
        const uint64_t key_at = c.pos();
        std::string key = c.string("metadata key #" + std::to_string(i));
        if (kv_index.count(key)) c.fail_at(key_at, "metadata key '" + key + "' appears twice");
        const std::string what = "metadata key '" + key + "'";
        const uint64_t type_at = c.pos();
        const ValueType t = vp.value_type(what);
        const uint64_t value_at = c.pos();
        Value v = vp.value(t, what, 0);
        if (key == "general.alignment") {
            if (t != ValueType::UINT32)
                c.fail_at(type_at, "general.alignment has type " + std::string(value_type_name(t)) + ", expected uint32");
            const uint64_t a = std::get<uint64_t>(v.v);
            if (!is_power_of_two(a))
                c.fail_at(value_at, "general.alignment is " + std::to_string(a) + ", not a non-zero power of two");
            alignment = static_cast<uint32_t>(a);
        }
        kv_index.emplace(key, kv.size());
        kv.push_back(KeyValue{std::move(key), std::move(v)});
    }

    // --- tensor infos; offset checks wait until the data section is known.
    std::vector<uint64_t> offset_at;
    tensors.reserve(static_cast<size_t>(n_tensors));
    offset_at.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) {
        TensorInfo t;
        const uint64_t name_at = c.pos();
        t.name = c.string("the name of tensor #" + std::to_string(i));
        const std::string what = "tensor '" + t.name + "'";
        if (tensor_index.count(t.name)) c.fail_at(name_at, what + ": the name appears twice");

        const uint64_t dims_at = c.pos();
        const uint32_t n_dims = c.u32(what + ": n_dims");
        if (n_dims < 1 || n_dims > static_cast<uint32_t>(kMaxDims))
            c.fail_at(dims_at, what + ": n_dims is " + std::to_string(n_dims) + ", expected 1 to " + std::to_string(kMaxDims));
        t.shape.resize(n_dims);
        int64_t n_elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const uint64_t dim_at = c.pos();
            const uint64_t ne = c.u64(what + ": dimension " + std::to_string(d));
            if (ne < 1 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
                c.fail_at(dim_at, what + ": dimension " + std::to_string(d) + " is " +
                                      std::to_string(static_cast<int64_t>(ne)) + ", expected at least 1");
            const auto sne = static_cast<int64_t>(ne);
            if (n_elements > std::numeric_limits<int64_t>::max() / sne)
                c.fail_at(dim_at, what + ": the element count overflows 64 bits");
            n_elements *= sne;
            t.shape[d] = sne;
        }

        const uint64_t type_at = c.pos();
        const uint32_t type_id = c.u32(what + ": type");
        const auto tr = type_traits(type_id);
        if (!tr) c.fail_at(type_at, what + ": type id " + std::to_string(type_id) + " is unknown");
        t.type = tr->type;
        if (t.shape[0] % tr->block_size != 0)
            c.fail_at(dims_at, what + ": row length " + std::to_string(t.shape[0]) + " is not a multiple of the " +
                                   std::string(tr->name) + " block size " + std::to_string(tr->block_size));
        const auto n_blocks = static_cast<uint64_t>(n_elements / tr->block_size);
        if (n_blocks > std::numeric_limits<uint64_t>::max() / tr->type_size)
            c.fail_at(dims_at, what + ": the byte size overflows 64 bits");
        t.n_bytes = n_blocks * tr->type_size;

        offset_at.push_back(c.pos());
        t.offset = c.u64(what + ": offset");

        tensor_index.emplace(t.name, tensors.size());
        tensors.push_back(std::move(t));
    }

    // --- data section: the header end rounded up to the alignment. A file
    // without tensors may stop right after the header (no padding).
    const uint64_t header_end = c.pos();
    data_offset = align_up(header_end, alignment);
    const uint64_t file_size = storage.size();
    const uint64_t data_size = data_offset <= file_size ? file_size - data_offset : 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const TensorInfo& t = tensors[i];
        if (t.offset % alignment != 0)
            c.fail_at(offset_at[i], "tensor '" + t.name + "': offset " + std::to_string(t.offset) +
                                        " is not a multiple of the alignment " + std::to_string(alignment));
        if (t.offset > data_size || t.n_bytes > data_size - t.offset)
            c.fail_at(offset_at[i], "tensor '" + t.name + "': its " + std::to_string(t.n_bytes) + " bytes at offset " +
                                        std::to_string(t.offset) + " run past the end of the data section (" +
                                        std::to_string(data_size) + " bytes from byte " + std::to_string(data_offset) + ")");
    }
}

// ---------------------------------------------------------------------------

int64_t TensorInfo::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::string& path, OpenOptions opts) {
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    impl->storage.load(path, opts.use_mmap);
    impl->parse();
    return File(std::move(impl));
}

File File::from_memory(const void* data, size_t size, std::string name) {
    auto impl = std::make_unique<Impl>();
    impl->path = std::move(name);
    const auto* p = static_cast<const uint8_t*>(data);
    impl->storage.adopt(size ? std::vector<uint8_t>(p, p + size) : std::vector<uint8_t>{});
    impl->parse();
    return File(std::move(impl));
}

const std::string& File::path() const { return impl_->path; }
uint32_t File::version() const { return impl_->version; }
uint32_t File::alignment() const { return impl_->alignment; }
uint64_t File::data_offset() const { return impl_->data_offset; }
uint64_t File::file_size() const { return impl_->storage.size(); }
bool File::is_mmapped() const { return impl_->storage.mapped(); }

const std::vector<KeyValue>& File::metadata() const { return impl_->kv; }

const Value* File::find(std::string_view key) const {
    const auto it = impl_->kv_index.find(key);
    return it == impl_->kv_index.end() ? nullptr : &impl_->kv[it->second].value;
}

namespace {
std::string key_context(const std::string& path, std::string_view key) {
    return path + ": metadata key '" + std::string(key) + "'";
}
}  // namespace

std::optional<std::string> File::get_string(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    return v->as_string(key_context(impl_->path, key));
}

std::optional<uint64_t> File::get_u64(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    return v->as_u64(key_context(impl_->path, key));
}

std::optional<int64_t> File::get_i64(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    return v->as_i64(key_context(impl_->path, key));
}

std::optional<double> File::get_f64(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    return v->as_f64(key_context(impl_->path, key));
}

std::optional<bool> File::get_bool(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    return v->as_bool(key_context(impl_->path, key));
}

const Array* File::get_array(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return nullptr;
    return &v->as_array(key_context(impl_->path, key));
}

const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }

const TensorInfo* File::find_tensor(std::string_view name) const {
    const auto it = impl_->tensor_index.find(name);
    return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

std::span<const uint8_t> File::tensor_data(const TensorInfo& t) const {
    // The info may come from elsewhere (a copy, another file); re-check the
    // range rather than trust it.
    const uint64_t size = impl_->storage.size();
    const uint64_t start = impl_->data_offset;
    if (start > size || t.offset > size - start || t.n_bytes > size - start - t.offset)
        throw Error(impl_->path + ": tensor '" + t.name + "': bytes " + std::to_string(t.offset) + "+" +
                    std::to_string(t.n_bytes) + " are outside the data section");
    return {impl_->storage.data() + start + t.offset, static_cast<size_t>(t.n_bytes)};
}

}  // namespace kiln::gguf
