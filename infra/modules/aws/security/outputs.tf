output "security_group_id" {
  description = "ID of the cluster's security group."
  value       = aws_security_group.this.id
}

output "self_ingress_rule_id" {
  description = "ID of the all-traffic ingress rule that references the group itself."
  value       = aws_vpc_security_group_ingress_rule.self.security_group_rule_id
}

output "self_egress_rule_id" {
  description = "ID of the all-traffic egress rule that references the group itself."
  value       = aws_vpc_security_group_egress_rule.self.security_group_rule_id
}

output "ssh_ingress_cidrs" {
  description = "CIDR blocks that can reach TCP 22 (empty when SSH is off)."
  value       = sort([for rule in aws_vpc_security_group_ingress_rule.ssh : rule.cidr_ipv4])
}
