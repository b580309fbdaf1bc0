import FoundationEssentials

/// The text of /proc/self/mountinfo, read (`CgroupTree` reads the file).
public enum Mountinfo {
    /// Where the cgroup v2 hierarchy is mounted, by the mount table `text`; nil when it is not.
    public static func cgroup2MountPoint(in text: String) -> String? {
        for line in text.split(separator: "\n") {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE SUPEROPTIONS
            guard let separator = line.firstRange(of: " - ") else { continue }
            guard line[separator.upperBound...].hasPrefix("cgroup2 ") else { continue }
            let fields = line[..<separator.lowerBound].split(separator: " ")
            if fields.count >= 5 { return unescape(fields[4]) }
        }
        return nil
    }

    /// mountinfo writes a space, tab, newline and backslash in a path as `\040`, `\011`, `\012`, `\134`.
    private static func unescape(_ field: Substring) -> String {
        var bytes: [UInt8] = []
        var rest = Array(field.utf8)[...]
        while let byte = rest.popFirst() {
            if byte == UInt8(ascii: "\\"), rest.count >= 3, let value = UInt8(String(decoding: rest.prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                rest = rest.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
