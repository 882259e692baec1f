"""Feetech STS/SCS bus (SO-100 / SO-101 arms)."""

from __future__ import annotations

from drivers.bus import SerialServoBus, VendorSpec
from drivers.feetech import tables
from drivers.feetech.protocol import CODEC, decode_error
from drivers.packets import Status


class FeetechBus(SerialServoBus):
    spec = VendorSpec(
        codec=CODEC,
        table=tables.STS_TABLE,
        ping_params=0,
        load="Present_Load",
        voltage="Present_Voltage",
        voltage_unit_v=tables.VOLTAGE_UNIT_V,
        model_names=tables.MODEL_NUMBERS,
    )

    def _fault_bits(self, status: Status) -> tuple[str, ...]:
        return decode_error(status.error)

    def _model_number(self, servo_id: int, status: Status) -> int:
        # A Feetech ping reply carries no data; the model number is a register.
        reg = self.spec.table["Model_Number"]
        reply = self._transact(
            CODEC.read(servo_id, reg.address, reg.size),
            (servo_id,),
            reg.size,
            what=f"read Model_Number of id {servo_id}",
            check_faults=False,
        )[0]
        return reg.from_bytes(reply.params)

    def _write_eeprom(self, servo_id: int, name: str, value: int) -> None:
        # STS EEPROM only accepts writes while Lock (SRAM address 55) is 0; lock again afterwards
        # so a stray write cannot change the id or the limits.
        self.write_id(servo_id, "Lock", 0)
        try:
            self.write_id(servo_id, name, value)
        finally:
            self.write_id(servo_id, "Lock", 1)
