import FoundationEssentials
import PinproxyCore

/// The files made from the declarations (`ConfigSchema`, `RefusalReason.traits`) and the prose
/// of each table below: `config/pinproxy.toml`, the key tables of `docs/configuration.md`, the
/// reason table of `docs/trust-decisions.md`, and the `pinproxy.toml(5)` man page.
/// `pinproxy generate-docs` writes them; a unit test fails when a committed one differs.
public enum GeneratedDocs {
    /// A file of the repository that is generated, in whole or in part.
    public struct File: Sendable {
        /// Relative to the repository's root.
        public let path: String
        /// The file's text as it should be, given its text as committed (a file generated in
        /// part keeps everything but its generated parts); nil when a generated part's place
        /// (its heading) is missing.
        public let render: @Sendable (_ committed: String) -> String?
    }

    public static let files: [File] = [
        File(path: "config/pinproxy.toml") { _ in ConfigReference.toml },
        File(path: "docs/configuration.md") { committed in
            var text = committed
            for table in ConfigReference.keyTables {
                guard let replaced = MarkdownTable.replace(after: table.heading, in: text, with: MarkdownTable.keys(table.keys)) else { return nil }
                text = replaced
            }
            return text
        },
        File(path: "docs/trust-decisions.md") { committed in
            MarkdownTable.replace(after: RefusalReason.docsHeading, in: committed, with: RefusalReason.markdownTable)
        },
    ]

    /// `pinproxy.toml(5)`, in roff: `version` and `date` (YYYY-MM-DD) go in its header.
    public static func manPage(version: String, date: String) -> String { ConfigReference.manPage(version: version, date: date) }
}

/// One table of the config as the reference files show it: its header, its prose and its keys.
struct ReferenceTable {
    /// `[proxy]`, `[clients."SELECTOR"]`.
    let header: String
    /// Whether the reference config writes the header itself (uncommented): only where an
    /// empty table changes nothing.
    let writesHeader: Bool
    /// The heading of docs/configuration.md the key table follows.
    let heading: String
    /// Paragraphs said before the keys.
    let prose: [String]
    let keys: [ConfigKeyDeclaration]
    /// Commented lines the reference config shows after the keys (examples).
    let examples: [String]
}

enum ConfigReference {
    static let tables: [ReferenceTable] = [
        ReferenceTable(header: "[proxy]", writesHeader: true, heading: "## `[proxy]`", prose: [
            "How the daemon listens, where it keeps its CA, its limits and timeouts. Restart-only keys take effect at the next start; a reload that changes one logs a warning naming it. Every other key takes effect at a reload.",
        ], keys: ConfigSchema.proxy.declarations, examples: []),
        ReferenceTable(header: "[capture]", writesHeader: false, heading: "## `[capture]`", prose: [
            "The egress lock (`pinproxy egress print|apply|remove|status`): an nftables table that sends this host's outgoing HTTPS to `transparent_listen`. The daemon does not read these keys: `pinproxy egress apply` does. Writing the table with ports but no `transparent_listen` is warned about.",
        ], keys: ConfigSchema.capture.declarations, examples: []),
        ReferenceTable(header: "[resolve]", writesHeader: false, heading: "## `[resolve]`", prose: [
            "Names answered here instead of by DNS: one address or a list. These answers are checked like DNS answers: a private address here needs block_private_destinations = false.",
        ], keys: [], examples: [#""api.internal.test" = "127.0.0.1""#, #""dual.internal.test" = ["127.0.0.1", "::1"]"#]),
        ReferenceTable(header: "[default]", writesHeader: true, heading: "## Policy keys", prose: [
            "The policy for hosts that no [hosts.\"PATTERN\"] entry matches. The policy keys are valid here and in every [hosts.\"PATTERN\"] entry. Host entries do not inherit from [default]: a key an entry leaves out takes its declared default.",
        ], keys: ConfigSchema.policy.declarations, examples: []),
        ReferenceTable(header: #"[hosts."PATTERN"]"#, writesHeader: false, heading: "## Host patterns", prose: [
            "Host patterns: an exact name, \"*.example.com\" (exactly one more label), or an IP literal. Precedence: exact > \"*.\" > include_subdomains (longest suffix) > [default].",
        ], keys: [], examples: [
            #"[hosts."api.example.com"]"#, #"pin = "public-key""#,
            #"pins = ["sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "sha256/BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBA="]  # current and backup key"#,
            "", #"[hosts."internal.example.test"]"#, #"trust = "pinned""#, #"pin = "certificate""#, #"certificates = ["pinned/internal.pem"]"#,
            "", #"[hosts."tracker.example.com"]"#, #"action = "deny""#,
        ]),
        ReferenceTable(header: #"[clients."SELECTOR"]"#, writesHeader: false, heading: "## Policy per client: `[clients]`", prose: [
            "Which local clients may reach which hosts: the kernel says who owns each client's socket. Selectors: uid:N, user:NAME (looked up when the config loads), exe:/absolute/path (the program: an identification, not a confinement), unit:NAME.service (system units only), unknown (a local socket that was not found), remote (a peer that is not this host).",
            "Every matching section applies: a host must be in each one's allow and in no one's deny. Once any section exists, unknown clients are refused unless [clients.\"unknown\"] says otherwise; remote clients are limited only by [clients.\"remote\"]. Refusals say client-denied (403).",
        ], keys: ConfigSchema.clients.declarations, examples: []),
    ]

    /// The tables docs/configuration.md shows (those with keys).
    static var keyTables: [ReferenceTable] { tables.filter { !$0.keys.isEmpty } }

    // MARK: config/pinproxy.toml

    static var toml: String {
        var lines = [
            "# pinproxy configuration: the reference for every key, each commented out with its default",
            "# (or an example, where a key has none). As it is, this file gives the built-in config that",
            "# `pinproxy run` uses without --config. Generated from pinproxy's key declarations by",
            "# `pinproxy generate-docs`: edit those (Sources/PinproxyPolicy/Config/ConfigSchema*.swift).",
            "#",
            "# Point clients at the proxy:   HTTPS_PROXY=http://127.0.0.1:3128",
            "# Check a config:               pinproxy check --config FILE",
            "# Compute pins:                 pinproxy pin cert.pem   |   pinproxy pin --connect HOST",
            "# Paths in this file are relative to the file's own directory.",
        ]
        for table in tables {
            lines.append("")
            lines.append(table.writesHeader ? table.header : "# " + table.header)
            for paragraph in table.prose { lines += wrapped(plain(paragraph), prefix: "# ") }
            for key in table.keys {
                lines.append("")
                var doc = sentence(plain(key.doc))
                doc += " Values: \(plain(key.values))."
                switch (key.defaultValue, key.effect) {
                case (.unset(let words), _): doc += " Default: \(plain(words))."
                case (.value, _): break
                }
                switch key.effect {
                case .reload: break
                case .restart: doc += " Restart-only."
                case .egressApply: break
                }
                lines += wrapped(doc, prefix: "# ")
                switch key.defaultValue {
                case .value(let value): lines.append("# \(key.name) = \(value)")
                case .unset: lines.append("# \(key.name) = \(key.example ?? "")")
                }
            }
            if !table.examples.isEmpty {
                lines.append("#")
                lines += table.examples.map { $0.isEmpty ? "#" : "# " + $0 }
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `text` without Markdown: a link is its text (a docs file named by its path), code is
    /// its words.
    static func plain(_ text: String) -> String {
        var result = text.replacing(/\[([^\]]+)\]\(([^)]*)\)/) { match in
            let words = String(match.1)
            return words.hasSuffix(".md") ? "docs/" + words : words
        }
        result = result.replacingEach(["`": ""])
        return result
    }

    /// `text` as a sentence: its first letter a capital, a full stop at its end.
    static func sentence(_ text: String) -> String {
        text.prefix(1).uppercased() + text.dropFirst() + "."
    }

    /// `text` in lines of at most 96 columns, each starting with `prefix`.
    static func wrapped(_ text: String, prefix: String, width: Int = 96) -> [String] {
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ") {
            if !line.isEmpty && prefix.count + line.count + 1 + word.count > width {
                lines.append(prefix + line)
                line = ""
            }
            line += (line.isEmpty ? "" : " ") + word
        }
        if !line.isEmpty { lines.append(prefix + line) }
        return lines
    }

    // MARK: pinproxy.toml(5)

    static func manPage(version: String, date: String) -> String {
        var lines = [
            #".TH PINPROXY.TOML 5 "\#(date)" "\#(roff(version))" "File Formats""#,
            ".SH NAME", #"pinproxy.toml \- the pinproxy configuration file"#,
            ".SH SYNOPSIS", "/etc/pinproxy/pinproxy.toml",
            ".SH DESCRIPTION",
            roff("The TOML file every pinproxy command reads (pinproxy check, evaluate, run). An empty file is valid and means every default. "
                 + "Unknown keys, wrong types and forbidden combinations are errors, reported as FILE:LINE; check a file with pinproxy check --config FILE. "
                 + "Relative paths are relative to the file's own directory. The keys take effect at a reload unless marked restart-only."),
        ]
        for table in tables {
            lines.append(".SH " + "\"" + roff(table.header).replacingEach(["\"": "\"\""]) + "\"")
            for paragraph in table.prose { lines += [".PP", roff(plain(paragraph))] }
            for key in table.keys {
                lines += [".TP", "\\fB\(roff(key.name))\\fR (\(roff(plain(key.values))))"]
                var text = sentence(plain(key.doc))
                switch key.defaultValue {
                case .value(let value): text += " Default: \(value)."
                case .unset(let words): text += " Default: \(plain(words))."
                }
                switch key.effect {
                case .reload: break
                case .restart: text += " Restart-only."
                case .egressApply: text += " Applied by pinproxy egress apply."
                }
                lines.append(roff(text))
            }
            if !table.examples.isEmpty {
                lines += [".PP", "Example:", ".PP", ".nf"] + table.examples.map(roff) + [".fi"]
            }
        }
        lines += [".SH SEE ALSO", #"\fBpinproxy\fR(1), \fBpinproxy-check\fR(1)"#]
        return lines.joined(separator: "\n") + "\n"
    }

    /// `text` safe in a roff line: backslashes escaped, hyphens as hyphens, no leading control
    /// character.
    static func roff(_ text: String) -> String {
        let escaped = text.replacingEach(["\\": "\\e", "-": "\\-"])
        return escaped.hasPrefix(".") || escaped.hasPrefix("'") ? "\\&" + escaped : escaped
    }
}

/// The key tables and the reason table of docs/, and where they go.
enum MarkdownTable {
    /// A table of docs/configuration.md as the declarations give it.
    static func keys(_ keys: [ConfigKeyDeclaration]) -> String {
        var lines = ["| key | values | default | meaning |", "|---|---|---|---|"]
        for key in keys {
            let defaultValue = switch key.defaultValue {
            case .value(let value): "`\(value)`"
            case .unset(let words): words
            }
            let effect = switch key.effect {
            case .reload: ""
            case .restart: "; restart-only"
            case .egressApply: "; applied by `pinproxy egress apply`"
            }
            lines.append("| \(key.name) | \(key.values.replacingEach(["|": "\\|"])) | \(defaultValue) | \(key.doc)\(effect) |")
        }
        return lines.joined(separator: "\n")
    }

    /// The first table after the line `heading` in `markdown`, before the next heading of level 2.
    static func range(after heading: String, in markdown: String) -> Range<String.Index>? {
        guard let start = markdown.firstRange(of: "\n" + heading + "\n") else { return nil }
        var tableStart: String.Index?
        var position = start.upperBound
        while position < markdown.endIndex {
            let lineEnd = markdown[position...].firstIndex(of: "\n") ?? markdown.endIndex
            let line = markdown[position..<lineEnd]
            if line.hasPrefix("## ") { break }
            if line.hasPrefix("|") {
                if tableStart == nil { tableStart = position }
            } else if let tableStart {
                return tableStart..<markdown.index(before: position)
            }
            position = lineEnd < markdown.endIndex ? markdown.index(after: lineEnd) : lineEnd
        }
        if let tableStart { return tableStart..<(markdown.hasSuffix("\n") ? markdown.index(before: markdown.endIndex) : markdown.endIndex) }
        return nil
    }

    /// `markdown` with the first table after `heading` replaced by `table`; nil when there is none.
    static func replace(after heading: String, in markdown: String, with table: String) -> String? {
        guard let range = range(after: heading, in: markdown) else { return nil }
        var text = markdown
        text.replaceSubrange(range, with: table)
        return text
    }
}
