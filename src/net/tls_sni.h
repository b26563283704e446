// The server name a TLS client asks for (SNI), read from its ClientHello without any TLS
// library: the egress proxy checks it against the host the client CONNECTed to, so a tunnel
// to an allowed address cannot be fronted for another name.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace warren::net {

enum class SniResult { kNeedMore, kNotTls, kNoSni, kFound };

// `data`: the first bytes the client sent in the tunnel. kNeedMore: the ClientHello record is
// not complete yet.
SniResult ParseSni(std::string_view data, std::string* name);

}  // namespace warren::net
