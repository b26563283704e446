// The multipart/form-data scanner of the E2B upload: bodies as undici (Node's fetch) writes
// them, content that looks almost like a delimiter, delimiters across every chunk edge, and
// the limits and malformed bodies it refuses without naming the spool file.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "server/e2b/multipart.h"
#include "test_files.h"

namespace warren::server::e2b {
namespace {

const std::string kBoundary = "----formdata-undici-0123456789";
const std::string kDash = "--" + kBoundary;
const std::string kClose = kDash + "--\r\n";

// One file part the way undici's FormData serializer writes it.
std::string FilePart(const std::string& name, const std::string& filename,
                     const std::string& bytes) {
  return kDash + "\r\nContent-Disposition: form-data; name=\"" + name + "\"; filename=\"" +
         filename + "\"\r\nContent-Type: application/octet-stream\r\n\r\n" + bytes + "\r\n";
}

// A string field the way undici writes it: no filename, no Content-Type.
std::string FieldPart(const std::string& name, const std::string& value) {
  return kDash + "\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + value +
         "\r\n";
}

// Parts as one comparable, readable string.
std::string Describe(const std::vector<MultipartPart>& parts) {
  std::string s;
  for (const auto& p : parts)
    s += "[" + p.name + "|" + p.filename + "|" + p.content_type + "|" + std::to_string(p.offset) +
         "+" + std::to_string(p.size) + "]";
  return s;
}

class MultipartScan : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/warren-multipart-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/upload.body";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Scans `body` from a file, with the default chunk size or `chunk` bytes at a time.
  Result<std::vector<MultipartPart>> Scan(const std::string& body, size_t chunk = 0) {
    testing::WriteFile(path_, body);
    return chunk == 0 ? ScanMultipartFile(path_, kBoundary)
                      : detail::ScanMultipartFileForTest(path_, kBoundary, chunk);
  }

  // The scan of `body` fails as malformed, saying `what`, without the file's path.
  void ExpectMalformed(const std::string& body, const std::string& what, size_t chunk = 0) {
    auto r = Scan(body, chunk);
    ASSERT_FALSE(r.ok()) << "chunk " << chunk;
    EXPECT_EQ(r.status().code(), Code::kInvalid);
    EXPECT_EQ(r.status().op(), "read multipart upload");
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().ToString();
    EXPECT_EQ(r.status().ToString().find(dir_), std::string::npos) << r.status().ToString();
  }

  std::string dir_, path_;
};

std::string Content(const std::string& body, const MultipartPart& p) {
  return body.substr(p.offset, p.size);
}

TEST_F(MultipartScan, ReadsABodyExactlyAsUndiciWritesIt) {
  const std::string body =
      "------formdata-undici-0123456789\r\n"
      "Content-Disposition: form-data; name=\"file\"; filename=\"/tmp/a.txt\"\r\n"
      "Content-Type: application/octet-stream\r\n"
      "\r\n"
      "hello world\n"
      "\r\n"
      "------formdata-undici-0123456789--\r\n";
  auto r = Scan(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  const MultipartPart& p = (*r)[0];
  EXPECT_EQ(p.name, "file");
  EXPECT_EQ(p.filename, "/tmp/a.txt");
  EXPECT_EQ(p.content_type, "application/octet-stream");
  EXPECT_EQ(p.offset, body.find("hello"));
  EXPECT_EQ(p.size, 12u);
  EXPECT_EQ(Content(body, p), "hello world\n");
}

TEST_F(MultipartScan, ReturnsThePartsInOrder) {
  const std::string body = FieldPart("path", "/home/user/x") + FilePart("file", "x", "first file") +
                           FilePart("file", "y", "second") + kClose;
  auto r = Scan(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].name, "path");
  EXPECT_EQ((*r)[0].filename, "");
  EXPECT_EQ((*r)[0].content_type, "");
  EXPECT_EQ(Content(body, (*r)[0]), "/home/user/x");
  EXPECT_EQ((*r)[1].filename, "x");
  EXPECT_EQ(Content(body, (*r)[1]), "first file");
  EXPECT_EQ((*r)[2].filename, "y");
  EXPECT_EQ(Content(body, (*r)[2]), "second");
}

TEST_F(MultipartScan, KeepsBinaryContentWithCrlfAndPartialBoundaries) {
  // Everything that starts like a delimiter but is not one: CRLF alone, CRLF "--", every
  // proper prefix of the boundary after CRLF "--", the whole "--boundary" without its CRLF,
  // NULs and high bytes, and a prefix of the delimiter right before the real one.
  std::string bytes = "--" + kBoundary + "\r\n";  // at the very start: not after a CRLF
  const char odd[] = "\0\xff\r\n\r\n\r\r\n-\r\n--\r\n---\n--";
  bytes += std::string(odd, sizeof(odd) - 1);
  for (size_t k = 0; k < kBoundary.size(); ++k) bytes += "\r\n--" + kBoundary.substr(0, k) + "!";
  bytes += "x--" + kBoundary + "--\r\n";
  bytes += testing::RandomBytes(3000, 7);
  bytes += "\r\n--" + kBoundary.substr(0, kBoundary.size() - 1);
  const std::string body = FilePart("file", "bin", bytes) + kClose;
  for (size_t chunk : {size_t{0}, size_t{1}, size_t{7}, size_t{64}}) {
    auto r = Scan(body, chunk);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ(Content(body, (*r)[0]), bytes) << "chunk " << chunk;
  }
}

TEST_F(MultipartScan, AnEmptyPartHasSizeZeroAtItsPlace) {
  const std::string body = FilePart("a", "a", "x") + FilePart("empty", "e", "") +
                           FilePart("c", "c", "yz") + FieldPart("last", "") + kClose;
  auto r = Scan(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[1].name, "empty");
  EXPECT_EQ((*r)[1].size, 0u);
  const std::string empty_head = FilePart("empty", "e", "");
  EXPECT_EQ((*r)[1].offset, body.find(empty_head) + empty_head.size() - 2);
  EXPECT_EQ(Content(body, (*r)[2]), "yz");
  EXPECT_EQ((*r)[3].name, "last");
  EXPECT_EQ((*r)[3].size, 0u);
  EXPECT_EQ((*r)[3].offset, body.size() - kClose.size() - 2);
}

TEST_F(MultipartScan, DecodesOnlyTheThreeFormEscapesInNames) {
  const std::string body = FilePart("we%22ird", "dir/a%22b%0D%0A%0d%0a.txt", "1") +
                           FilePart("f", "100%25%41%2522%2.txt", "2") +
                           FilePart("f", "C:\\dir\\x;y.txt", "3") + kClose;
  auto r = Scan(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].name, "we\"ird");
  EXPECT_EQ((*r)[0].filename, "dir/a\"b\r\n\r\n.txt");
  EXPECT_EQ((*r)[1].filename, "100%25%41%2522%2.txt");  // one pass, three escapes only
  EXPECT_EQ((*r)[2].filename, "C:\\dir\\x;y.txt");      // no backslash escapes; ';' quoted
}

TEST_F(MultipartScan, FindsDelimitersAcrossEveryChunkEdge) {
  const std::string body = "preamble\r\n" + FieldPart("path", "/a") +
                           FilePart("file", "f", "0123456789\r\n--" + kBoundary.substr(0, 5)) +
                           FilePart("e", "", "") + kClose + "epilogue";
  auto want = Scan(body);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  ASSERT_EQ(want->size(), 3u);
  for (size_t chunk = 1; chunk <= 64; ++chunk) {
    auto r = Scan(body, chunk);
    ASSERT_TRUE(r.ok()) << "chunk " << chunk << ": " << r.status().ToString();
    EXPECT_EQ(Describe(*r), Describe(*want)) << "chunk " << chunk;
  }
  for (size_t chunk : {body.size() - 1, body.size(), body.size() + 1}) {
    auto r = Scan(body, chunk);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(Describe(*r), Describe(*want)) << "chunk " << chunk;
  }
}

TEST_F(MultipartScan, ContentLargerThanAChunkLiesInTheFile) {
  const std::string big = testing::RandomBytes((3 << 20) + 17, 11);
  const std::string body = FilePart("file", "big.bin", big) + FilePart("tail", "t", "end") + kClose;
  auto r = Scan(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].size, big.size());
  EXPECT_TRUE(Content(body, (*r)[0]) == big);
  EXPECT_EQ(Content(body, (*r)[1]), "end");
}

TEST_F(MultipartScan, APartWithoutATerminatingBoundaryIsAnError) {
  const std::string part = FilePart("file", "f", "content");
  const std::string start = part.substr(0, part.size() - 2);  // content, no CRLF after it
  for (size_t chunk : {size_t{0}, size_t{1}, size_t{5}}) {
    ExpectMalformed(start, "part 1 has no terminating boundary", chunk);
    ExpectMalformed(FieldPart("a", "b") + start, "part 2 has no terminating boundary", chunk);
    ExpectMalformed(part.substr(0, part.find("\r\n\r\n")), "part 1 has no terminating boundary",
                    chunk);
    ExpectMalformed(part + kDash, "ends without its closing boundary", chunk);
    ExpectMalformed(part + kDash + "\r", "ends without its closing boundary", chunk);
    ExpectMalformed(part + kDash + "-", "ends without its closing boundary", chunk);
    ExpectMalformed(kDash, "ends without its closing boundary", chunk);
  }
}

TEST_F(MultipartScan, IgnoresPreambleEpilogueAndTransportPadding) {
  const std::string body = "This is the preamble.\r\nIt mentions x" + kDash + " in passing.\r\n" +
                           kDash + " \t\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n" +
                           "data\r\n" + kClose + "epilogue\r\n" + FieldPart("ghost", "boo") +
                           kClose;
  auto r = Scan(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].name, "f");
  EXPECT_EQ(Content(body, (*r)[0]), "data");
}

TEST_F(MultipartScan, AClosingBoundaryRightAwayHasNoParts) {
  auto r = Scan(kClose);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->empty());
}

TEST_F(MultipartScan, NoOpeningBoundaryIsAnError) {
  ExpectMalformed("", "no opening boundary");
  ExpectMalformed("just some bytes\r\n", "no opening boundary");
  ExpectMalformed("--other\r\n\r\nx\r\n--other--\r\n", "no opening boundary");
  // A boundary not at the start of a line is not a delimiter: here only preamble.
  ExpectMalformed("x" + FilePart("f", "f", "y"), "no opening boundary", 3);
  // So the first delimiter is the closing one: no parts.
  auto r = Scan("x" + FilePart("f", "f", "y") + kClose, 3);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->empty());
}

TEST_F(MultipartScan, AMalformedBoundaryLineIsAnError) {
  ExpectMalformed(kDash + "junk\r\n\r\nx\r\n" + kClose, "more after the boundary");
  ExpectMalformed(FilePart("f", "f", "x") + kDash + "X\r\n" + kClose, "more after the boundary");
}

TEST_F(MultipartScan, ReadsHeadersInAnyCaseFoldedAndUnquoted) {
  const std::string body = kDash +
                           "\r\ncontent-disposition: FORM-DATA;\r\n NAME=\"f\"; "
                           "FileName=upload.bin; filename*=UTF-8''other\r\n"
                           "CONTENT-TYPE:text/plain; charset=utf-8 \r\nX-Other: 1\r\n\r\nabc\r\n" +
                           kDash + "\r\n\r\nno headers\r\n" + kClose;
  auto r = Scan(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].name, "f");
  EXPECT_EQ((*r)[0].filename, "upload.bin");
  EXPECT_EQ((*r)[0].content_type, "text/plain; charset=utf-8");
  EXPECT_EQ(Content(body, (*r)[0]), "abc");
  EXPECT_EQ((*r)[1].name, "");
  EXPECT_EQ(Content(body, (*r)[1]), "no headers");
}

TEST_F(MultipartScan, AMalformedHeaderLineIsAnError) {
  ExpectMalformed(kDash + "\r\nNo colon here\r\n\r\nx\r\n" + kClose, "malformed header line");
  ExpectMalformed(kDash + "\r\nContent-Disposition: form-data; name=\"f\r\n\r\nx\r\n" + kClose,
                  "unterminated quote");
}

TEST_F(MultipartScan, HeadersOver16KiBAreAnError) {
  // A header block of exactly 16 KiB, blank line included, is taken; one byte more is not.
  const std::string disposition = "Content-Disposition: form-data; name=\"f\"\r\n";
  auto part = [&](size_t block) {
    const size_t pad = block - disposition.size() - std::string("X-Pad: \r\n\r\n").size();
    return kDash + "\r\n" + disposition + "X-Pad: " + std::string(pad, 'a') + "\r\n\r\nx\r\n";
  };
  auto r = Scan(part(kMultipartMaxHeaderBytes) + kClose);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].name, "f");
  ExpectMalformed(part(kMultipartMaxHeaderBytes + 1) + kClose, "part 1 has headers over 16 KiB");
  ExpectMalformed(FieldPart("a", "b") + part(kMultipartMaxHeaderBytes + 1) + kClose,
                  "part 2 has headers over 16 KiB", 4096);
}

TEST_F(MultipartScan, MoreThan10000PartsAreAnError) {
  std::string body;
  for (size_t i = 0; i < kMultipartMaxParts; ++i) body += FieldPart("f", std::to_string(i));
  auto r = Scan(body + kClose);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), kMultipartMaxParts);
  EXPECT_EQ(Content(body, r->back()), "9999");
  ExpectMalformed(body + FieldPart("f", "one more") + kClose, "more than 10000 parts");
}

TEST_F(MultipartScan, ANestedMultipartPartIsAnError) {
  ExpectMalformed(FieldPart("a", "b") + kDash +
                      "\r\nContent-Disposition: form-data; name=\"files\"\r\n"
                      "Content-Type: Multipart/Mixed; boundary=inner\r\n\r\n"
                      "--inner\r\n\r\nx\r\n--inner--\r\n\r\n" +
                      kClose,
                  "part 2 is a nested multipart part");
}

TEST_F(MultipartScan, AMissingFileIsAnErrorThatDoesNotNameIt) {
  auto r = ScanMultipartFile(dir_ + "/absent", kBoundary);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().op(), "read multipart upload");
  EXPECT_EQ(r.status().ToString().find(dir_), std::string::npos) << r.status().ToString();
}

TEST_F(MultipartScan, AnInvalidBoundaryIsAnError) {
  testing::WriteFile(path_, FieldPart("a", "b") + kClose);
  for (const std::string& b :
       {std::string(), std::string("a\r\nb"), std::string("quote\"d"), std::string(71, 'b')}) {
    auto r = ScanMultipartFile(path_, b);
    ASSERT_FALSE(r.ok()) << b;
    EXPECT_EQ(r.status().code(), Code::kInvalid);
  }
}

TEST(MultipartContentType, TakesTheBoundaryQuotedOrNotInAnyCase) {
  auto b = MultipartBoundary("multipart/form-data; boundary=" + kBoundary);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*b, kBoundary);
  b = MultipartBoundary("Multipart/Form-Data; BOUNDARY=\"abc def'()+_,-./:=?\"");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*b, "abc def'()+_,-./:=?");
  b = MultipartBoundary("multipart/form-data;charset=\"utf-8;x\";Boundary=q");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*b, "q");
  b = MultipartBoundary(" MULTIPART/FORM-DATA ; boundary = xyz ; other=1");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*b, "xyz");
  b = MultipartBoundary("multipart/form-data; boundary=" + std::string(70, 'b'));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
}

TEST(MultipartContentType, WithoutAValidBoundaryIsAnError) {
  for (std::string ct : {
           "multipart/form-data",
           "multipart/form-data; charset=utf-8",
           "multipart/form-data; boundaryx=abc",
           "multipart/form-data; boundary=",
           "multipart/form-data; boundary=\"\"",
           "multipart/form-data; boundary=\"abc",
           "multipart/form-data; boundary=\"abc \"",
           "multipart/form-data; boundary=a\\b",
           "multipart/mixed; boundary=abc",
           "text/plain; boundary=abc",
           "",
       }) {
    auto b = MultipartBoundary(ct);
    ASSERT_FALSE(b.ok()) << ct;
    EXPECT_EQ(b.status().code(), Code::kInvalid) << ct;
  }
  EXPECT_FALSE(MultipartBoundary("multipart/form-data; boundary=" + std::string(71, 'b')).ok());
}

}  // namespace
}  // namespace warren::server::e2b
