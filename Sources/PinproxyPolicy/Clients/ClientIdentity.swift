import PinproxyCore

/// Who is at the other end of a client connection: what the kernel records for the client's
/// socket, never anything the client sends.
public enum ClientIdentity: Sendable, Equatable, CustomStringConvertible {
    /// A process on this host owns the client's socket.
    case local(LocalClient)
    /// The peer is one of this host's addresses, but its socket was not found, is not
    /// established, or no process holds it any more; `why` says which.
    case unknown(why: String)
    /// The peer is not one of this host's addresses and connected to a listener directly:
    /// nothing was looked up.
    case remote
    /// A process on this host owns the client's socket, but a part of who it is (its unit)
    /// could not be looked up; `missing` says which and why. Fail closed: it answers to the
    /// sections its known parts match and to `[clients."unknown"]` together (`ClientPolicy.decide`).
    case partlyKnown(LocalClient, missing: String)

    /// The peer is not one of this host's addresses and this host forwards its traffic: the
    /// egress lock redirected it from a `forward_interfaces` interface (a container, a VM, a
    /// LAN behind the host). Known by its source address only (`net:` sections).
    case forwarded(IPAddress)

    /// `uid=1000 user=alice unit=backup.service exe=/usr/bin/git`, `unknown (why)`, `remote`,
    /// `uid=1000 user=alice unknown (why)` for a partly known client, or `forwarded from 172.17.0.2`.
    public var description: String {
        switch self {
        case .local(let client): return client.description
        case .unknown(let why): return "unknown (\(why))"
        case .remote: return "remote"
        case .partlyKnown(let client, let missing): return "\(client) unknown (\(missing))"
        case .forwarded(let address): return "forwarded from \(address)"
        }
    }

    /// Whether who the client is is not (wholly) known: `unknown`, or partly known.
    public var isUnknown: Bool {
        switch self {
        case .unknown, .partlyKnown: true
        case .local, .remote, .forwarded: false
        }
    }
}

/// The owner of a local client's socket.
public struct LocalClient: Sendable, Equatable, CustomStringConvertible {
    /// The user that created the socket.
    public var uid: UInt32
    /// Its name, when the user database has one (display only: `user:` rules match the uid).
    public var user: String?
    /// The systemd system unit of the socket's cgroup (`NAME.service`), when it is one.
    public var unit: String?
    /// The executable of a process holding the socket, best effort (`exe:` rules only).
    public var exe: String?

    public init(uid: UInt32, user: String? = nil, unit: String? = nil, exe: String? = nil) {
        self.uid = uid
        self.user = user
        self.unit = unit
        self.exe = exe
    }

    public var description: String {
        ["uid=\(uid)", user.map { "user=\($0)" }, unit.map { "unit=\($0)" }, exe.map { "exe=\($0)" }]
            .compactMap { $0 }.joined(separator: " ")
    }
}

/// The systemd system unit a cgroup belongs to.
public enum SystemUnit {
    /// The service unit of the cgroup at `path` (relative to the cgroup v2 root): the
    /// `NAME.service` directory under `/system.slice`, through nested system slices
    /// (`/system.slice/system-getty.slice/getty@tty1.service`), or a cgroup below one
    /// (`/system.slice/NAME.service/payload`). Nil for anything else: user units live under
    /// `/user.slice`, where any user can name a unit as they like.
    public static func name(ofCgroup path: String) -> String? {
        var components = path.split(separator: "/", omittingEmptySubsequences: false)
        guard components.first == "", components.count >= 3, components[1] == "system.slice" else { return nil }
        components.removeFirst(2)
        for component in components {
            if component.hasSuffix(".slice") { continue }
            return isServiceName(component) ? String(component) : nil
        }
        return nil
    }

    /// `NAME.service` as systemd allows it: letters, digits and `:-_.\@`, at most 255 bytes,
    /// an instance (`name@instance.service`) or a plain name.
    public static func isServiceName<Text: StringProtocol>(_ name: Text) -> Bool {
        guard name.hasSuffix(".service"), name.utf8.count > ".service".count, name.utf8.count <= 255 else { return false }
        let stem = name.utf8.dropLast(".service".utf8.count)
        guard stem.first != UInt8(ascii: "@") else { return false }
        return stem.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            default:
                return ":-_.\\@".utf8.contains(byte)
            }
        }
    }
}
