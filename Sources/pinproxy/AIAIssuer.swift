import FoundationEssentials
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// The issuer a leaf names in its authorityInfoAccess extension (caIssuers), fetched over plain
/// HTTP for `diagnose` when no certificate it knows issued a leaf the server sent alone. The
/// leaf that names the URL is itself unverified, so what the URL serves is only ever offered as
/// an intermediate on the way to an anchor pinproxy already has, never as an anchor.
struct AIAIssuer {
    /// The URL, as the leaf writes it.
    let url: String
    /// The certificate it served, or why there is none.
    let result: Result<Certificate, any Error>

    /// The most a fetch reads: an issuer certificate is 1 to 2 KiB.
    static let limit = 64 * 1024

    /// Fetches the first caIssuers URL of `leaf` (an http:// one where there are several) before
    /// `deadline`; nil when the leaf names none.
    static func fetch(for leaf: Certificate, deadline: Deadline) -> AIAIssuer? {
        let urls = leaf.caIssuersURIs
        guard let url = urls.first(where: { $0.lowercased().hasPrefix("http://") }) ?? urls.first else { return nil }
        return AIAIssuer(url: url, result: Result { try get(url, deadline: deadline) })
    }

    /// The first certificate (DER or PEM) served at `url`, an http:// URL: a connection to the
    /// host and port it names and nowhere else, through no proxy, following no redirect.
    static func get(_ url: String, deadline: Deadline) throws -> Certificate {
        guard url.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }),
              let components = URLComponents(string: url), components.scheme?.lowercased() == "http",
              let named = components.host, !named.isEmpty, components.user == nil, components.password == nil else {
            throw Unfetched(description: "only a plain http:// URL is fetched")
        }
        guard deadline.remaining > 0 else { throw DiagnoseCommand.NotTried(seconds: deadline.seconds) }
        let host = named.trimmingBrackets()
        guard let port = UInt16(exactly: components.port ?? 80), port > 0 else { throw Unfetched(description: "no valid port") }
        let literal = host.contains(":") ? "[\(host)]" : host
        let path = (components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath)
            + (components.percentEncodedQuery.map { "?" + $0 } ?? "")
        let body = try BlockingHTTPGet.body(host: host, port: port, path: path, hostHeader: port == 80 ? literal : "\(literal):\(port)",
                                            limit: limit, deadline: deadline)
        let certificates: [Certificate]
        do { certificates = try Certificate.parseAll(body) } catch {
            throw Unfetched(description: "the answer \(error) (a PKCS #7 bundle is not read)")
        }
        guard let certificate = certificates.first else { throw Unfetched(description: "the answer holds no certificate") }
        return certificate
    }

    /// A URL not fetched, or an answer that holds no certificate.
    struct Unfetched: Error, CustomStringConvertible {
        let description: String
    }

    /// The line `diagnose` prints under the chain: what the URL served, and whether it issued `leaf`.
    func summary(leaf: Certificate) -> String {
        switch result {
        case .success(let issuer):
            let issued = leaf.isIssued(by: issuer) ? "issued the leaf" : "did NOT issue the leaf"
            return "the leaf's AIA URL \(url) served \(issuer.subject) (\(issued); public-key: \(Pin(digest: issuer.publicKeySHA256)))"
        case .failure(let error):
            return "the leaf's AIA URL \(url): no issuer fetched (\(DiagnoseCommand.brief(error)))"
        }
    }
}
