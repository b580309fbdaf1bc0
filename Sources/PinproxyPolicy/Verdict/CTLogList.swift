import FoundationEssentials
import PinproxyCore
import PinproxyInterop

/// The Certificate Transparency logs pinproxy knows, read from a file in the format of Chrome's
/// published `log_list.json` (version 3): operators, each with `logs` (RFC 6962) and
/// `tiled_logs` (static CT API), each log with its `key` (DER SubjectPublicKeyInfo, base64), its
/// `log_id` (base64 SHA-256 of the key) and its `state` with the time it entered it. Nothing is
/// fetched: the operator keeps the file current (`[proxy] ct_log_list`).
public struct CTLogList: Sendable {
    /// A log's state in Chrome's lifecycle.
    public enum State: String, Sendable, CaseIterable {
        case pending, qualified, usable, readonly, retired, rejected

        /// Qualified, Usable or ReadOnly: an SCT from it counts whenever it was made.
        public var isCurrentlyApproved: Bool { self == .qualified || self == .usable || self == .readonly }
    }

    /// One log.
    public struct Log: Sendable, Equatable {
        /// SHA-256 of `key`: how an SCT names its log.
        public let id: [UInt8]
        /// The DER SubjectPublicKeyInfo the log signs with.
        public let key: [UInt8]
        public let description: String
        /// The operator's name, as the list writes it.
        public let operatorName: String
        public let state: State
        /// When the log entered `state`.
        public let stateSince: Date

        public init(id: [UInt8], key: [UInt8], description: String, operatorName: String, state: State, stateSince: Date) {
            (self.id, self.key, self.description, self.operatorName, self.state, self.stateSince)
                = (id, key, description, operatorName, state, stateSince)
        }
    }

    /// Every log, in file order.
    public let logs: [Log]
    /// `log_list_timestamp`: when the list was published.
    public let published: Date
    private let byID: [[UInt8]: Int]

    /// After this many days Chrome stops enforcing CT with a list; pinproxy then reports only.
    public static let maximumAgeDays = 70

    public init(logs: [Log], published: Date) {
        self.logs = logs
        self.published = published
        var byID: [[UInt8]: Int] = [:]
        for (index, log) in logs.enumerated() where byID[log.id] == nil { byID[log.id] = index }
        self.byID = byID
    }

    /// The log an SCT names by `id`, if the list has it.
    public func log(id: [UInt8]) -> Log? { byID[id].map { logs[$0] } }

    /// The list's age at `time`, in seconds (negative when published in the future).
    public func age(at time: Date) -> TimeInterval { time.timeIntervalSince(published) }

    /// Whether the list is too old to enforce with at `time` (more than 70 days).
    public func isStale(at time: Date) -> Bool { age(at: time) > TimeInterval(Self.maximumAgeDays) * 86_400 }

    /// The largest list file read (Chrome's own is about 40 KiB).
    public static let maximumBytes = FileKind.ctLogList.readLimit

    /// Reads a list. The error says what is wrong, without a line (the caller names the file).
    public static func parse(_ bytes: [UInt8]) throws(CTLogListError) -> CTLogList {
        guard bytes.count <= maximumBytes else { throw CTLogListError("larger than \(maximumBytes >> 20) MiB") }
        let file: FileFormat
        do {
            file = try JSONDecoder().decode(FileFormat.self, from: Data(bytes))
        } catch let error as DecodingError {
            throw CTLogListError("is not a log list in the format of Chrome's log_list.json v3: \(describe(error))")
        } catch {
            throw CTLogListError("is not JSON: \(error)")
        }
        guard let published = parseTimestamp(file.log_list_timestamp) else {
            throw CTLogListError("log_list_timestamp \"\(file.log_list_timestamp)\" is not an RFC 3339 time")
        }
        var logs: [Log] = []
        var seen = Set<[UInt8]>()
        for (operatorIndex, op) in file.operators.enumerated() {
            let operatorName = op.name.isEmpty ? "operator \(operatorIndex + 1)" : op.name
            for entry in (op.logs ?? []) + (op.tiled_logs ?? []) {
                let name = entry.description ?? entry.log_id
                guard let key = Data(base64Encoded: entry.key), !key.isEmpty else {
                    throw CTLogListError("log \"\(name)\" of \(operatorName): key is not base64")
                }
                guard let id = Data(base64Encoded: entry.log_id), id.count == 32 else {
                    throw CTLogListError("log \"\(name)\" of \(operatorName): log_id is not the base64 of 32 bytes")
                }
                guard SHA256.hash(Array(key)) == Array(id) else {
                    throw CTLogListError("log \"\(name)\" of \(operatorName): log_id is not the SHA-256 of its key")
                }
                guard seen.insert(Array(id)).inserted else {
                    throw CTLogListError("log \"\(name)\" of \(operatorName): its log_id appears twice")
                }
                guard let states = entry.state, states.count == 1, let (word, since) = states.first else {
                    throw CTLogListError("log \"\(name)\" of \(operatorName): state must name exactly one of \(State.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                guard let state = State(rawValue: word) else {
                    throw CTLogListError("log \"\(name)\" of \(operatorName): unknown state \"\(word)\" (expected one of \(State.allCases.map(\.rawValue).joined(separator: ", ")))")
                }
                guard let stateSince = parseTimestamp(since.timestamp) else {
                    throw CTLogListError("log \"\(name)\" of \(operatorName): the \(word) timestamp \"\(since.timestamp)\" is not an RFC 3339 time")
                }
                logs.append(Log(id: Array(id), key: Array(key), description: name, operatorName: operatorName, state: state, stateSince: stateSince))
            }
        }
        guard !logs.isEmpty else { throw CTLogListError("lists no log") }
        return CTLogList(logs: logs, published: published)
    }

    /// An RFC 3339 time, with or without fractional seconds.
    static func parseTimestamp(_ text: String) -> Date? {
        if let date = try? Date.ISO8601FormatStyle().parse(text) { return date }
        return try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text)
    }

    private static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? "." + $0.stringValue }.joined()
            return keys.isEmpty ? "the top level" : String(keys.drop { $0 == "." })
        }
        switch error {
        case .keyNotFound(let key, let context): return "\(path(context)): \"\(key.stringValue)\" is missing"
        case .typeMismatch(_, let context), .valueNotFound(_, let context): return "\(path(context)): \(context.debugDescription)"
        case .dataCorrupted(let context): return "\(path(context)): \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }

    // The file's shape: only what pinproxy reads; other fields are ignored.
    private struct FileFormat: Decodable {
        let log_list_timestamp: String
        let operators: [Operator]
    }

    private struct Operator: Decodable {
        let name: String
        let logs: [LogEntry]?
        let tiled_logs: [LogEntry]?
    }

    private struct LogEntry: Decodable {
        let description: String?
        let log_id: String
        let key: String
        let state: [String: StateEntry]?
    }

    private struct StateEntry: Decodable {
        let timestamp: String
    }
}

/// Why a CT log list cannot be used.
public struct CTLogListError: Error, Sendable, CustomStringConvertible {
    public let description: String

    init(_ description: String) {
        self.description = description
    }
}

/// The CT log list of one config generation, with OpenSSL's store of its keys: what the
/// verdict validates and counts SCTs with. A reload reads the list again.
public final class CTLogs: Sendable {
    /// The file it was read from.
    public let path: String
    public let list: CTLogList
    public let store: CTLogStore

    public init(path: String, list: CTLogList) throws(CTLogListError) {
        self.path = path
        self.list = list
        do {
            store = try CTLogStore(keys: list.logs.map(\.key))
        } catch {
            throw CTLogListError("a log key is not a public key OpenSSL reads: \(error)")
        }
    }

    /// Reads and checks the list at `path`.
    public static func load(path: String) throws(CTLogListError) -> CTLogs {
        let bytes: [UInt8]
        do {
            bytes = try FilePathBytes(path).read(.ctLogList)
        } catch {
            throw CTLogListError(error == .missing ? "no such CT log list" : "the CT log list \(error)")
        }
        return try CTLogs(path: path, list: CTLogList.parse(bytes))
    }
}
